"""`venus-edge eval` end to end: the shipped Python-docs set on SmolLM2 (--strict) over the real docs, and a kill
with SIGKILL mid-run on a tiny Qwen3 that the rerun resumes without redoing finished samples."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from venus_edge.cli import main
from venus_edge.eval.runner import RESULTS_FILE, read_rows
from venus_edge.trajectory import read_trajectories

# 1,200 new tokens a turn: a strict turn (256 characters of reasoning, up to three strings of 100) is at most ~1,150
# characters, so in ASCII no turn is cut by max_tokens whatever SmolLM2 writes (and each turn completes).
SESSION = ["--strict", "--min-tool-calls", "1", "--max-turns", "2", "--max-tokens", "1200", "--quiet", "--no-plot"]


@pytest.mark.slow
def test_eval_runs_the_shipped_set_on_a_real_model(smollm2_gguf, docs_corpus, tmp_path, capsys, real_model_run):
    out = tmp_path / "eval"
    code = main(["eval", "pydocs", "--model", str(smollm2_gguf), "--corpus", str(docs_corpus), "--n-ctx", "4096",
                 "--limit", "2", "--k", "2", "--aggregate", "majority", "--out", str(out), *SESSION,
                 *real_model_run.cli_args()])
    stdout = capsys.readouterr().out
    assert code == 0
    rows = read_rows(out / RESULTS_FILE)
    assert sorted((r.id, r.sample) for r in rows) == [("pydocs-001", 0), ("pydocs-001", 1), ("pydocs-002", 0),
                                                       ("pydocs-002", 1)]
    assert all(r.tool_calls >= 1 and r.tokens_decoded > 0 and r.prefill_s > 0 for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"] == 4 and "majority@2" in summary and "pass@2" in summary
    assert f"pass@1: {summary['pass@1']}" in stdout
    sessions = read_trajectories(out / "trajectories.jsonl")
    assert {s.session_id for s in sessions} == {r.session_id for r in rows}


def _eval_process(model: Path, data: Path, docs: Path, out: Path, run_args: list[str]) -> subprocess.Popen:
    """A free-running (no grammar) tiny model: turns of 48 tokens, one tool turn, a few seconds per sample."""
    command = [sys.executable, "-m", "venus_edge.cli", "eval", str(data), "--model", str(model), "--corpus", str(docs),
               "--n-ctx", "4096", "--k", "2", "--out", str(out), "--max-turns", "1", "--max-tokens", "48", "--quiet",
               "--no-plot", *run_args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_eval_killed_mid_run_resumes_where_it_stopped(tiny_qwen3_gguf, docs_corpus, tmp_path, real_model_run):
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is question {i} about?",
                                        "answer": "tomllib"}) + "\n" for i in range(3)))
    out = tmp_path / "eval"
    first = _eval_process(tiny_qwen3_gguf, data, docs_corpus, out, real_model_run.cli_args())
    deadline = time.monotonic() + 300
    while not (out / RESULTS_FILE).is_file() or not (out / RESULTS_FILE).read_text().count("\n"):
        assert first.poll() is None, first.communicate()[1].decode()[-2000:]
        assert time.monotonic() < deadline, "no row within 300 s"
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = read_rows(out / RESULTS_FILE)
    assert 1 <= len(before) < 6, "killed mid-run"

    second = _eval_process(tiny_qwen3_gguf, data, docs_corpus, out, real_model_run.cli_args())
    _, stderr = second.communicate(timeout=600)
    assert second.returncode == 0, stderr.decode()[-2000:]
    rows = read_rows(out / RESULTS_FILE)
    keys = [(r.id, r.sample) for r in rows]
    assert sorted(keys) == [(f"q{i}", s) for i in range(3) for s in range(2)], "every sample once, none twice"
    assert rows[: len(before)] == before, "finished samples are not redone"
    assert json.loads((out / "summary.json").read_text())["samples"] == 6
