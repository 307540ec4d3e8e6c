"""What ``venus-edge eval`` reports about itself: the record of what was run in ``summary.md`` and ``summary.json``
(model file and hash, every setting, eval's flags, versions, machine, date, command line), and a plain progress line
per finished sample when stderr is a file, not a terminal."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import sys
from importlib.metadata import version

from venus_edge.eval.cli import _Progress
from venus_edge.eval.records import EvalRow
from venus_edge.memory.machine import physical_cores
from venus_edge.session import SessionSettings


def test_eval_records_what_was_run_and_prints_progress_lines_to_a_file(tiny_qwen3_gguf, docs_corpus, tmp_path,
                                                                        real_model_run):
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is question {i} about?",
                                        "answer": "tomllib"}) + "\n" for i in range(3)))
    out = tmp_path / "eval"
    arguments = ["eval", str(data), "--model", str(tiny_qwen3_gguf), "--corpus", str(docs_corpus), "--n-ctx", "4096",
                 "--max-turns", "1", "--max-tokens", "48", "--out", str(out), "--no-plot", "--api-key", "s3cret",
                 *real_model_run.cli_args()]
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:  # a file: not a terminal
        done = subprocess.run([sys.executable, "-m", "venus_edge.cli", *arguments], stdout=subprocess.PIPE,
                              stderr=stderr, timeout=600)
    progress = log.read_text()
    assert done.returncode == 0, progress[-2000:]

    lines = [line for line in progress.splitlines() if line.startswith("eval: ")]
    assert [line.split(",")[0] for line in lines] == ["eval: 1/3 samples", "eval: 2/3 samples", "eval: 3/3 samples"]
    duration = r"\d+(s|m\d\ds|h\d\dm)"
    pattern = rf"eval: \d/3 samples, \d correct \(\d+%\), {duration} elapsed, about {duration} left"
    assert all(re.fullmatch(pattern, line) for line in lines), lines
    assert "\x1b[" not in progress, "no terminal control codes in a file"

    run = json.loads((out / "summary.json").read_text())["run"]
    assert run["command"] == "eval" and run["command_line"] == [
        "REDACTED" if value == "s3cret" else value for value in arguments]
    assert run["venus_edge_version"] == version("venus-edge")
    assert run["llama_cpp_python_version"] == version("llama_cpp_python")
    assert run["machine"]["physical_cores"] == physical_cores()
    [model] = run["models"]
    assert model["path"] == str(tiny_qwen3_gguf.resolve()) and model["architecture"] == "qwen3"
    assert model["sha256"] == hashlib.sha256(tiny_qwen3_gguf.read_bytes()).hexdigest()
    assert model["size_bytes"] == tiny_qwen3_gguf.stat().st_size
    settings = run["settings"]
    assert set(settings) == {field.name for field in dataclasses.fields(SessionSettings)}
    assert (settings["model"], settings["corpus"], settings["n_ctx"]) == (str(tiny_qwen3_gguf), [str(docs_corpus)],
                                                                          4096)
    assert (settings["max_turns"], settings["max_tokens"], settings["seed"]) == (1, 48, real_model_run.seed(0))
    assert settings["api_key"] == "(set)"
    assert run["flags"] == {"data": str(data), "k": 1, "judge": None, "aggregate": None, "parallel": False,
                            "limit": None, "out": str(out), "no_plot": True}
    assert run["engine"]["n_ctx"] == 4096 and run["engine"]["path"] == str(tiny_qwen3_gguf)
    assert run["samples_from_earlier_runs"] == 0

    markdown = (out / "summary.md").read_text()
    assert "## What was run" in markdown and f"sha256 `{model['sha256']}`" in markdown
    assert f"- date (UTC): {run['date_utc']}" in markdown and "| settings.max_tokens | 48 |" in markdown
    assert "| flags.k | 1 |" in markdown and "| engine.n_ctx | 4096 |" in markdown
    for text in (markdown, (out / "summary.json").read_text()):
        assert "s3cret" not in text


def _row(correct: bool) -> EvalRow:
    return EvalRow(id="q", sample=0, question="?", answers=["a"], prediction="a" if correct else "b", em=float(correct),
                   f1=float(correct), judge=None, correct=correct, termination="answered", turns=1, tool_calls=0,
                   prompt_tokens_evaluated=1, prompt_tokens_reused=0, tokens_decoded=1, prefill_s=0.0, decode_s=0.0,
                   elapsed_s=0.0)


def test_progress_counts_this_runs_samples_and_stays_silent_when_quiet(tmp_path):
    """A resumed run counts the samples it runs (``start``), not the set's; ``--quiet`` prints nothing."""
    with (tmp_path / "log").open("w") as stream:
        with _Progress(10, quiet=False, stream=stream) as progress:
            progress.start(4)
            progress.advance(_row(True))
            progress.advance(_row(False))
        with _Progress(10, quiet=True, stream=stream) as quiet:
            quiet.start(4)
            quiet.advance(_row(True))
    lines = (tmp_path / "log").read_text().splitlines()
    assert [line.split(", ")[:2] for line in lines] == [["eval: 1/4 samples", "1 correct (100%)"],
                                                        ["eval: 2/4 samples", "1 correct (50%)"]]
