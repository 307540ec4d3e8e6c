"""``venus-edge bench`` keeps what it measured and says when its figures cannot be trusted: a killed run leaves a
valid report of the configurations it finished, a rerun with the same --out measures only the rest (--fresh all of
them), the expected time comes before the first measurement, and a stage during which another process kept a core
busy is marked (real processes, real /proc figures, real llama.cpp on SmolLM2; no timed assertions)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from venus_edge.bench import BUSY_OTHERS_CORES, BenchConfig, BenchReport, ConfigResult, measure_config
from venus_edge.cli import main
from venus_edge.memory.machine import cpu_times, others_cores

BUSY_MARK = "†"
#: Seconds a wait for a real process may take before the test gives up (generous: the machine is shared).
PATIENCE_S = 300


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


class _OtherProcess:
    """A busy loop in a process that is not this one's child (started by a shell that exits at once), as other
    people's work on a shared machine is: its CPU time is never added to this process's."""

    def __init__(self) -> None:
        launched = subprocess.run(
            ["sh", "-c", f"'{sys.executable}' -c 'while True: pass' </dev/null >/dev/null 2>&1 & echo $!"],
            capture_output=True, text=True, check=True)
        self.pid = int(launched.stdout.strip())

    def cpu_s(self) -> float:
        """The CPU seconds it has used (utime + stime in /proc/PID/stat)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

        def gone() -> bool:
            try:
                return Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
            except (FileNotFoundError, ProcessLookupError):
                return True

        _wait_until(gone, "the spinning process to end")


@contextlib.contextmanager
def _spinning_elsewhere() -> Iterator[_OtherProcess]:
    spinner = _OtherProcess()
    try:
        yield spinner
    finally:
        spinner.stop()


# ---------------------------------------------------------------------------------------------- the /proc reader
def test_other_processes_cpu_counts_another_process_and_not_this_ones_work() -> None:
    """A process spinning elsewhere counts in ``others_cores`` (at least the CPU time /proc gives it, less a few
    ticks), and a stage over it is busy; this process's own work and that of a child it waited for count as its own.
    """
    with _spinning_elsewhere() as spinner:
        before, spun_before = cpu_times(), spinner.cpu_s()
        _wait_until(lambda: spinner.cpu_s() - spun_before >= 1.0, "a second of the spinner's CPU")
        after, spun = cpu_times(), spinner.cpu_s() - spun_before
    assert before is not None and after is not None
    others = others_cores(before, after)
    assert others is not None and others * (after.wall_s - before.wall_s) >= spun - 0.1, (others, spun)
    stage = ConfigResult(config={}, model={}, stages={"prefill": {"others_during": others}})
    assert stage.busy_stages() == {"prefill": others}  # a spinner over the whole span is more than a quarter core

    before = cpu_times()
    started = time.process_time()
    while time.process_time() - started < 0.5:  # this process's own work
        pass
    subprocess.run([sys.executable, "-c", "import time\nwhile time.process_time() < 0.5: pass"], check=True)
    after = cpu_times()
    assert before is not None and after is not None
    assert after.own_s - before.own_s >= 0.95, "this process's and its waited-for child's CPU are its own"


# ---------------------------------------------------------------------------------------------- busy stages
def test_a_stage_measured_while_another_process_spins_is_marked_busy(smollm2_gguf: Path) -> None:
    """A process spinning elsewhere through the prefill stage (started as the stage starts, stopped as the next one
    starts): that stage is recorded and marked busy, in the result, the report's figures and the remarks."""
    spinners: list[_OtherProcess] = []

    def progress(stage: str) -> None:
        if stage == "prefill":
            spinners.append(_OtherProcess())
            spun_from = spinners[0].cpu_s()
            _wait_until(lambda: spinners[0].cpu_s() - spun_from >= 0.3, "the spinner to run")
        elif spinners:
            spinners.pop().stop()

    config = BenchConfig(smollm2_gguf, threads=2, n_ctx=2048, prompt_lengths=(512, 1024), depths=(0,),
                         decode_tokens=8, repeats=1, llama_bench=False)
    try:
        result = measure_config(config, progress=progress)
    finally:
        for spinner in spinners:
            spinner.stop()
    assert list(result.stages) == ["load", "prefill", "first turn", "decode, and raw llama-cpp-python", "llama-bench"]
    for name, load in result.stages.items():
        assert load["others_before"] is not None and load["load_before"] is not None and load["load_after"] is not None
        if name != "llama-bench":  # not run: too short a span to tell
            assert load["wall_s"] is not None and load["wall_s"] > 0 and load["others_during"] is not None, name
    assert result.stages["llama-bench"]["others_during"] is None
    busy = result.busy_stages()
    assert "prefill" in busy and busy["prefill"] > BUSY_OTHERS_CORES, result.stages
    assert busy == {name: others for name, load in result.stages.items()
                    if (others := load["others_during"]) is not None and others > BUSY_OTHERS_CORES}
    markdown = BenchReport([result], machine={"cpu": "test", "cores": 2}).markdown()
    assert f"| {result.prefill[512]:.1f}{BUSY_MARK} | {result.prefill[1024]:.1f}{BUSY_MARK} |" in markdown
    assert f"figures of prefill (marked {BUSY_MARK}) were taken while other processes used" in markdown


def test_only_busy_stages_are_marked(smollm2_gguf: Path) -> None:
    """A quiet configuration (other processes under a quarter core in every stage) has no mark and no remark about
    it; a stage over the threshold marks its own figures only."""
    def result(others: dict[str, float]) -> ConfigResult:
        return ConfigResult(
            config={"model": str(smollm2_gguf), "kv_type": "f16", "threads": 2},
            model={"name": smollm2_gguf.name, "file_type": "Q4_1", "weight_bytes": 90 * 2**20}, load_s=0.4,
            memory={"weights": 90 * 2**20, "kv": 2**20, "compute": 2**20, "rss_used": 2**20},
            prefill={128: 300.0}, ttft_s=1.5, ttft_prompt_tokens=465, decode={0: 60.0}, decode_tokens={0: 64},
            raw_decode={0: 61.0}, llama_bench={"decode": {0: 62.0}, "prefill": {128: 310.0}},
            stages={stage: {"others_during": value} for stage, value in others.items()})

    stages = ("load", "prefill", "first turn", "decode, and raw llama-cpp-python", "llama-bench")
    quiet = BenchReport([result(dict.fromkeys(stages, 0.05))], machine={"cpu": "test", "cores": 2})
    rows = [line for line in quiet.markdown().splitlines() if line.startswith("| ")]
    assert rows and not any(BUSY_MARK in row for row in rows) and quiet.remarks() == []
    assert "| 0.05 |" in quiet.markdown()  # others' CPU, the most of any stage

    busy = BenchReport([result({**dict.fromkeys(stages, 0.05), "llama-bench": 1.4})],
                       machine={"cpu": "test", "cores": 2})
    markdown = busy.markdown()
    assert f"60.0 / 61.0 (0.98x) / 62.0{BUSY_MARK} (0.97x)" in markdown  # only llama-bench's figures
    assert f"300.0 / 310.0{BUSY_MARK} (0.97x)" in markdown and f"| 1.40 {BUSY_MARK} |" in markdown
    [remark] = [r for r in busy.remarks() if "other processes used" in r]
    assert "figures of llama-bench" in remark and "1.40 of 2 cores" in remark and "quiet machine" in remark


# ---------------------------------------------------------------------------------------------- keep and reuse
def _arguments(model: Path, out: Path) -> list[str]:
    return ["bench", str(model), "--kv-type", "f16,q8_0", "--threads", "2", "--n-ctx", "1024", "--prompt-lengths",
            "64", "--depths", "0", "--decode-tokens", "8", "--repeats", "1", "--no-session", "--no-llama-bench",
            "--no-plot", "--out", str(out)]


def _loads(stderr: str) -> list[str]:
    """The configurations whose engine was loaded: the progress lines of their load stage."""
    return [line.split(", ")[1] for line in stderr.splitlines() if line.startswith("bench: stage ")
            and line.split(", ")[1].endswith(": load")]


def test_a_killed_run_keeps_what_it_measured_and_a_rerun_measures_only_the_rest(
        smollm2_gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    arguments = _arguments(smollm2_gguf, out)
    log = tmp_path / "first.log"

    def measured() -> int:
        try:
            return len(json.loads((out / "report.json").read_text())["results"])
        except FileNotFoundError:
            return 0

    with log.open("w") as stderr:  # a file, not a terminal: one plain line per stage
        process = subprocess.Popen([sys.executable, "-m", "venus_edge.cli", *arguments], stdout=subprocess.DEVNULL,
                                   stderr=stderr)
        try:
            _wait_until(lambda: (out / "report.json").exists() or process.poll() is not None, "the first report")
            at_start = (out / "report.md").read_text()  # before any configuration is done: a run stopped now
            assert "**Incomplete**: 0 of 2 configurations measured" in at_start, at_start  # still leaves a report
            _wait_until(lambda: measured() >= 1 or process.poll() is not None, "the first configuration's report")
        finally:
            process.kill()  # as a user's kill -9 half way: nothing runs after it
            process.wait()
    first = log.read_text()
    assert measured() == 1, first
    assert first.index("bench: expected time: about ") < first.index("bench: stage 1/"), first
    assert "an estimate" in first
    saved = json.loads((out / "report.json").read_text())
    [kept] = saved["results"]
    assert kept["config"]["kv_type"] == "f16" and kept["decode"]["0"] > 0 and kept["key"]["model_sha256"]
    assert saved["pending"] == [f"{smollm2_gguf.name} kv=q8_0 t=2"]
    assert saved["timing"]["estimated_s"] > 0
    markdown = (out / "report.md").read_text()
    assert "**Incomplete**: 1 of 2 configurations measured; not yet: " in markdown and "expected time" in markdown
    assert "## What was run" in markdown  # the record is written with the first configuration

    assert main(arguments) == 0  # the same --out again
    second = capsys.readouterr()
    assert "bench: reused 1 measured configuration (same file and settings); 1 to measure" in second.err
    assert _loads(second.err) == [f"{smollm2_gguf.name} kv=q8_0 t=2: load"], second.err  # f16 not loaded again
    saved = json.loads((out / "report.json").read_text())
    assert [r["config"]["kv_type"] for r in saved["results"]] == ["f16", "q8_0"] and saved["pending"] == []
    assert saved["results"][0] == kept and saved["timing"]["reused"] == 1
    assert "1 configuration reused from an earlier run" in second.out and "Incomplete" not in second.out

    assert main([*arguments, "--fresh"]) == 0
    fresh = capsys.readouterr()
    assert "reused" not in fresh.err
    assert _loads(fresh.err) == [f"{smollm2_gguf.name} kv=f16 t=2: load", f"{smollm2_gguf.name} kv=q8_0 t=2: load"]
    assert json.loads((out / "report.json").read_text())["timing"]["reused"] == 0


def test_other_settings_are_measured_again(smollm2_gguf: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A report of the same file with another setting (--decode-tokens) reuses nothing."""
    out = tmp_path / "bench"
    arguments = _arguments(smollm2_gguf, out)
    arguments[arguments.index("f16,q8_0")] = "f16"
    assert main(arguments) == 0
    capsys.readouterr()
    changed = list(arguments)
    changed[changed.index("--decode-tokens") + 1] = "12"
    assert main(changed) == 0
    assert "reused" not in capsys.readouterr().err
    [result] = json.loads((out / "report.json").read_text())["results"]
    assert result["config"]["decode_tokens"] == 12


def test_a_report_that_cannot_be_read_stops_the_run_before_it_measures(smollm2_gguf: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    out.mkdir()
    (out / "report.json").write_text('{"results": [{"config"', encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(_arguments(smollm2_gguf, out))
    error = capsys.readouterr().err
    assert exited.value.code == 2 and f"{out / 'report.json'} cannot be read as a bench report" in error
    assert "--fresh" in error and "bench: stage" not in error
    assert (out / "report.json").read_text() == '{"results": [{"config"', "the file is left as it was"
