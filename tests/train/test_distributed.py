"""SFT and IGPO on two processes: ``accelerate launch --multi_gpu --num_processes 2`` with ``ACCELERATE_USE_CPU=1``
(DDP over gloo on the CPU). A step on two processes gives the weights of the same step on one; a run killed on one
of its processes fails with the launcher's report and resumes from its last checkpoint on another process count."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate")

#: what differs between the logs of two runs of the same steps: wall-clock figures
TIMINGS = ("rollout_tokens_per_s", "step_s", "tokens_per_s")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _command(processes: int, args: Sequence[str]) -> list[str]:
    """``python ARGS`` on one process; ``accelerate launch`` on ``processes`` CPU processes otherwise."""
    if processes == 1:
        return [sys.executable, *args]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(_free_port()), *args]


def _environment() -> dict[str, str]:
    # ACCELERATE_USE_CPU: without a GPU, --multi_gpu runs DDP over gloo on the CPU
    return {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}


def run(processes: int, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(_command(processes, args), capture_output=True, text=True, timeout=600,
                          env=_environment())
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def weights(folder: Path) -> dict[str, Any]:
    from safetensors.numpy import load_file

    found: dict[str, Any] = {}
    for shard in folder.glob("*.safetensors"):
        found |= load_file(str(shard))
    assert found, f"no weights in {folder}"
    return found


def max_difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert a.keys() == b.keys()
    return max(float(abs(a[key] - b[key]).max()) for key in a)


def log(folder: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMINGS} for row in rows]


def assert_same_figures(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert [row.keys() for row in a] == [row.keys() for row in b]
    for x, y in zip(a, b):
        for key in x:
            if isinstance(x[key], float):
                assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-9), (key, x, y)
            else:
                assert x[key] == y[key], (key, x, y)


@pytest.fixture(scope="module")
def toy(tmp_path_factory, make_toy) -> Path:
    out = tmp_path_factory.mktemp("distributed")
    make_toy(out, people=12, seed=5)
    return out


def test_one_igpo_update_on_two_processes_gives_the_weights_of_one(toy, tmp_path):
    """Hand-made rollouts with non-zero advantages (``dp_update_check.py``), a plain SGD step: the batch-level
    ``scaled_separate`` means, the token-mean and DDP's gradient average must all be the whole batch's."""
    script = str(Path(__file__).with_name("dp_update_check.py"))
    run(1, script, str(toy / "base"), str(tmp_path / "one"))
    run(2, script, str(toy / "base"), str(tmp_path / "two"))
    one, two, base = weights(tmp_path / "one"), weights(tmp_path / "two"), weights(toy / "base")
    assert max_difference({k: one[k] for k in base}, base) > 1e-2  # the step moved the weights
    assert max_difference(one, two) <= 1e-5
    a, b = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("one", "two"))
    assert a["groups"] == b["groups"] == 3 and a["all_same_outcome_groups"] == 1
    assert_same_figures([a], [b])
    # one question: the second process has no rollout, runs weightless passes and reaches every collective
    run(1, script, str(toy / "base"), str(tmp_path / "one-question"), "1")
    run(2, script, str(toy / "base"), str(tmp_path / "one-question-two"), "1")
    assert max_difference(weights(tmp_path / "one-question"), weights(tmp_path / "one-question-two")) <= 1e-5


def test_a_finished_run_destroys_its_process_group_on_every_process(tmp_path):
    """A process left with a live gloo group at exit can abort in interpreter finalization (SIGABRT, a finished
    run reported failed): ``end_processes`` destroys it on each process and says which one is the main process."""
    script = tmp_path / "ends.py"
    # each rank answers in a file of its own: two processes printing to one pipe can interleave their lines
    script.write_text("import sys\n"
                      "from pathlib import Path\n"
                      "import torch.distributed as dist\n"
                      "from accelerate import Accelerator\n"
                      "from venus_edge.train.checkpoints import end_processes\n"
                      "rank = Accelerator().process_index\n"
                      "assert dist.is_initialized()\n"
                      "is_main = end_processes()\n"
                      "answer = f'main {is_main}, group alive {dist.is_initialized()}'\n"
                      "Path(sys.argv[1], f'rank-{rank}').write_text(answer)\n")
    run(2, str(script), str(tmp_path))
    answers = {path.name: path.read_text() for path in tmp_path.glob("rank-*")}
    assert answers == {"rank-0": "main True, group alive False", "rank-1": "main False, group alive False"}


def _sft_config(toy: Path, out: Path, **settings: Any) -> Path:
    values = {"model": str(toy / "base"), "data": [str(toy / "sft.jsonl")], "output_dir": str(out),
              "global_batch_size": 4, "micro_batch_size": 2, "learning_rate": 3e-3, "warmup_ratio": 0.0,
              "gradient_checkpointing": False, "save_every": 1, **settings}
    path = out.parent / f"{out.name}.json"
    path.write_text(json.dumps(values))
    return path


def test_sft_steps_on_two_processes_give_the_weights_of_one_and_resume_across_counts(toy, tmp_path):
    """One step from scratch on 2 processes equals it on 1; a checkpoint written on 1 process resumes on 2 and its
    next step equals the one-process run's."""
    module = ("-m", "venus_edge.train.sft", "--quiet")
    run(1, *module, str(_sft_config(toy, tmp_path / "one", max_steps=2)))
    run(2, *module, str(_sft_config(toy, tmp_path / "two", max_steps=1)))
    step = "checkpoints/step-{:06d}"
    one, two = tmp_path / "one", tmp_path / "two"
    assert max_difference(weights(one / step.format(1)), weights(two / step.format(1))) <= 1e-5
    assert_same_figures(log(one)[:1], log(two))
    # written on 1 process, resumed on 2
    run(1, *module, str(_sft_config(toy, tmp_path / "switch", max_steps=1)))
    resumed = run(2, *module, str(_sft_config(toy, tmp_path / "switch", max_steps=2)))
    assert "written on 1 process, resumed on 2 processes" in resumed.stdout
    assert json.loads(resumed.stdout.splitlines()[-1])["resumed_from"] == 1
    switch = tmp_path / "switch"
    assert max_difference(weights(one / step.format(2)), weights(switch / step.format(2))) <= 1e-5
    assert_same_figures(log(one), log(switch))


@pytest.fixture(scope="module")
def igpo_one_process(toy, tmp_path_factory, igpo_config) -> Path:
    """The CI-sized IGPO run (2 steps of 2 questions x 2 rollouts) on one process; a KL weight of 1 gives the
    second step a gradient (a random model's rollouts are all malformed: zero advantages)."""
    out = tmp_path_factory.mktemp("igpo-one") / "run"
    run(1, "-m", "venus_edge.train.igpo_trainer", "--quiet", str(igpo_config(toy, out, kl_coef=1.0)))
    return out


def test_igpo_on_two_processes_samples_logs_and_trains_as_one(toy, tmp_path, igpo_config, igpo_one_process):
    out = tmp_path / "run"
    done = run(2, "-m", "venus_edge.train.igpo_trainer", "--quiet", str(igpo_config(toy, out, kl_coef=1.0)))
    summaries = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 1 and json.loads(summaries[0])["steps"] == 2  # the main process alone reports
    # the same rollouts (each process sampled its questions' groups with the run's seeds), gathered in order
    assert (out / "rollouts.jsonl").read_text() == (igpo_one_process / "rollouts.jsonl").read_text()
    rows = log(out)
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["groups"] == 2 and rows[1]["grad_norm"] > 0
    assert_same_figures(rows, log(igpo_one_process))
    assert max_difference(weights(out / "final"), weights(igpo_one_process / "final")) <= 1e-5


def _worker(launcher: int, rank: int) -> int | None:
    """The pid of the training process of ``rank`` started by the launcher ``launcher`` (its child, from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == launcher and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


def test_killing_one_of_two_processes_fails_the_run_and_it_resumes_on_one(toy, tmp_path, igpo_config,
                                                                          igpo_one_process):
    out = tmp_path / "run"
    config = igpo_config(toy, out, kl_coef=1.0)
    launcher = subprocess.Popen(_command(2, ["-m", "venus_edge.train.igpo_trainer", "--quiet", str(config)]),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environment(),
                                start_new_session=True)
    try:
        checkpoint = out / "checkpoints" / "step-000001" / "state.json"
        deadline = time.monotonic() + 300
        while not checkpoint.exists() and launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert checkpoint.exists() and launcher.poll() is None, "the run did not reach its first checkpoint"
        rank_one = _worker(launcher.pid, 1)
        assert rank_one is not None
        os.kill(rank_one, signal.SIGKILL)  # in step 2, after step 1's checkpoint
        _, stderr = launcher.communicate(timeout=300)
    finally:
        if launcher.poll() is None:  # the workers run in sessions of their own: the launcher, then its workers
            workers = [pid for pid in (_worker(launcher.pid, 0), _worker(launcher.pid, 1)) if pid is not None]
            for pid in (launcher.pid, *workers):
                os.kill(pid, signal.SIGKILL)
            launcher.wait()
    assert launcher.returncode != 0
    assert "Signal 9 (SIGKILL)" in stderr and "venus_edge.train.igpo_trainer FAILED" in stderr, stderr[-3000:]
    assert not (out / "final").exists()
    # the last whole checkpoint resumes on one process, to the weights of the run that was never interrupted
    resumed = run(1, "-m", "venus_edge.train.igpo_trainer", str(config), "--quiet")
    summary = json.loads(resumed.stdout.splitlines()[-1])
    assert summary["resumed_from"] >= 1 and summary["steps"] == 2
    assert "written on 2 processes, resumed on 1 process" in resumed.stdout
    assert [r["step"] for r in log(out)] == [1, 2]
    assert max_difference(weights(out / "final"), weights(igpo_one_process / "final")) <= 1e-5
    # a run stopped after its last checkpoint but before the final save writes it on the rerun, here on 2 processes
    shutil.rmtree(out / "final")
    again = run(2, "-m", "venus_edge.train.igpo_trainer", str(config), "--quiet")
    assert "written on 1 process, resumed on 2 processes" in again.stdout
    assert max_difference(weights(out / "final"), weights(igpo_one_process / "final")) <= 1e-5


def test_igpo_refuses_sharded_weights_on_several_processes():
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from venus_edge.train.igpo_trainer import _check_distribution

    for kind in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        with pytest.raises(ValueError, match="runs under DDP"):
            _check_distribution(SimpleNamespace(distributed_type=kind, num_processes=2))
        _check_distribution(SimpleNamespace(distributed_type=kind, num_processes=1))  # one process: allowed
    _check_distribution(SimpleNamespace(distributed_type=DistributedType.MULTI_CPU, num_processes=2))
