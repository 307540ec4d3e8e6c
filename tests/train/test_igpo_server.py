"""IGPO rollouts on a model server (the scale path): a managed llama-server restarted on each step's weights, a
running server given ``sync_command``, and the recorded ids and log-probabilities checked against the policy."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from venus_edge.agent import AgentConfig  # noqa: E402
from venus_edge.cli import main as cli  # noqa: E402
from venus_edge.engines.base import SamplingParams  # noqa: E402
from venus_edge.testing import LlamaServer  # noqa: E402
from venus_edge.toolbox import close_tools, default_tools  # noqa: E402
from venus_edge.train.igpo_rollout import RecordingEngine, run_rollout  # noqa: E402
from venus_edge.train.igpo_trainer import IGPOConfig, _sequence_logprobs  # noqa: E402
from venus_edge.train.rollout_servers import RolloutServer  # noqa: E402

SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, presence_penalty=0.0, max_tokens=24, logprobs=True)


@pytest.fixture(scope="module")
def toy(tmp_path_factory, make_toy) -> Path:
    out = tmp_path_factory.mktemp("igpo-server")
    make_toy(out, people=12, seed=6)
    return out


def _questions(toy: Path) -> list[dict]:
    return [json.loads(line) for line in (toy / "world" / "questions-train.jsonl").read_text().splitlines()]


def _rollout_on(engine, toy: Path, seed: int):
    question = _questions(toy)[0]
    tools = default_tools([toy / "world" / "corpus"])
    try:
        return run_rollout(RecordingEngine(engine), tools, question["question"], [question["answer"]], group="q",
                           agent_config=AgentConfig(max_turns=2, max_retries=1, sampling=SAMPLING, seed=seed,
                                                        answer_reserve_tokens=512))
    finally:
        close_tools(tools)


def _largest_logprob_gap(model, rollout) -> float:
    """The largest difference between the server's log-prob of a sampled token and the policy's, over the trained
    tokens of the rollout the server sent one for. A sampled id missing from the record (llama-server leaves the
    tokens that end inside a UTF-8 character out of its streamed replies; a random model writes many) would shift
    every later context and show here."""
    gaps = []
    for sequence in rollout.sequences:
        with torch.no_grad():
            ours = _sequence_logprobs(model, sequence.ids, "cpu").tolist()
        gaps += [abs(ours[i - 1] - sequence.old_logprobs[i]) for i, turn in enumerate(sequence.turn_of)
                 if turn >= 0 and not math.isnan(sequence.old_logprobs[i])]
    assert gaps, "the rollout trained no token"
    return max(gaps)


def test_a_managed_llama_server_samples_with_the_policys_log_probs_and_follows_its_updates(toy, tmp_path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(toy / "base")
    model = transformers.AutoModelForCausalLM.from_pretrained(toy / "base", dtype=torch.float32).eval()
    config = IGPOConfig.from_dict({"model": "m", "questions": ["q"], "corpus": ["c"], "output_dir": "o",
                                   "rollout_server": "llama-server", "rollout_concurrency": 2, "n_ctx": 2048})
    server = RolloutServer(config, tmp_path / "server")
    try:
        engine = server.serve(model, tokenizer)
        assert engine.n_ctx == 2048  # each of the server's slots holds one rollout's window
        first = _rollout_on(engine, toy, seed=3)
        assert first.failure is None and first.turns
        # token in, token out: the ids the server sampled and their log-probs are the policy's (F32 weights, KV
        # cache and attention)
        assert _largest_logprob_gap(model, first) < 1e-4
        with torch.no_grad():  # an optimizer step, in effect
            generator = torch.Generator().manual_seed(0)
            for parameter in model.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
        stale = _largest_logprob_gap(model, first)
        assert stale > 5e-2, "the update must change the log-probs for this check to mean anything"
        engine = server.serve(model, tokenizer)
        assert _largest_logprob_gap(model, _rollout_on(engine, toy, seed=4)) < 1e-4  # the new weights are served
    finally:
        server.close()
    assert server.process is None and server.engine is None


def test_a_ci_sized_run_on_a_managed_llama_server(toy, igpo_config, tmp_path):
    config = igpo_config(toy, tmp_path / "run", rollout_server="llama-server", rollout_concurrency=2)
    assert cli(["train", "igpo", str(config), "--quiet"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["failures"] == 0 and r["trained_tokens"] > 0 for r in rows)
    assert len((tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()) == 2 * 2 * 2
    assert (tmp_path / "run" / "rollout-policy" / "policy.gguf").is_file() and (tmp_path / "run" / "final").is_dir()


def test_a_running_server_is_given_the_policy_by_the_sync_command_before_each_step(toy, igpo_config, tmp_path,
                                                                                   capsys):
    from venus_edge.quantize.convert import convert_checkpoint

    gguf = convert_checkpoint(toy / "base", tmp_path / "base.gguf", out_type="f32")
    marker = tmp_path / "synced.txt"
    record = f"import pathlib, sys; pathlib.Path({str(marker)!r}).open('a').write(sys.argv[1] + '\\n')"
    sync = f"{sys.executable} -c {json.dumps(record)} {{model_dir}}"
    server = LlamaServer(gguf, slots=2, n_ctx=4096)
    try:
        config = igpo_config(toy, tmp_path / "run", rollout_server=server.url, rollout_concurrency=2,
                             sync_command=sync)
        assert cli(["train", "igpo", str(config), "--quiet"]) == 0
        synced = marker.read_text().splitlines()
        assert len(synced) == 2 and all((Path(folder) / "config.json").is_file() for folder in synced)
        rows = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
        assert [r["failures"] for r in rows] == [0, 0]
        failing = igpo_config(toy, tmp_path / "failing", rollout_server=server.url,
                          sync_command=f"{sys.executable} -c 'import sys; sys.exit(\"no reload endpoint\")' "
                                       "{model_dir}")
        assert cli(["train", "igpo", str(failing), "--quiet"]) == 4
        assert "sync_command exited with 1: no reload endpoint" in capsys.readouterr().err
    finally:
        server.stop()


@pytest.mark.parametrize(("settings", "message"), [
    ({"rollout_server": "http://127.0.0.1:9"}, "a rollout_server URL needs sync_command"),
    ({"rollout_server": "tgi"}, "rollout_server must be one of llama-server, vllm, sglang or an http(s) URL"),
    ({"rollout_server": "llama-server", "rollout_server_url": "http://127.0.0.1:9"},
     "rollout_server_url names a running vllm or sglang server"),
    ({"rollout_server": "vllm", "rollout_server_url": "127.0.0.1:9"}, "rollout_server_url must be an http(s) URL"),
    ({"rollout_server": "sglang", "sync_command": "reload {model_dir}"}, "sync_command is for a rollout_server URL"),
    ({"rollout_server": "http://127.0.0.1:9", "sync_command": "reload"}, "sync_command must name {model_dir}"),
    ({"rollout_concurrency": 0}, "rollout_concurrency must be >= 1"),
])
def test_bad_rollout_server_settings_are_errors(toy, igpo_config, tmp_path, capsys, settings, message):
    assert cli(["train", "igpo", str(igpo_config(toy, tmp_path / "bad", **settings)), "--quiet"]) == 2
    assert message in capsys.readouterr().err
