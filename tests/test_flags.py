"""The command line's numeric flags: every value is either taken or refused as a usage error that names the flag,
never a traceback from deeper in (issue 26: ``--n-ctx 0`` and ``--max-tokens 0`` raised ValueError from the
planner and the sampling settings); output to a closed pipe ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from venus_edge.cli import EXIT_BROKEN_PIPE, build_parser

# flag -> (values taken, values refused)
# Huge values are taken here; those a model cannot run with are refused when it loads, with the fix
# (tests/test_cli_messages.py: --n-ctx beyond the machine) or clamped (test_huge_values_run_or_are_refused_cleanly).
HUGE = "99999999999"
NUMERIC_FLAGS = {
    "--n-ctx": (["1", "4096", HUGE], ["0", "-5", "abc", "1.5", ""]),
    "--max-tokens": (["1", "15000", HUGE], ["0", "-1", "many"]),
    "--max-turns": (["1", "200", HUGE], ["0", "-2", "2.0"]),
    "--threads": (["1", "16", "512"], ["0", "-3", "all", "513", "100000", HUGE]),
    "--search-results": (["1", "10", HUGE], ["0", "-2", "x"]),
    "--time-limit": (["0.5", "9000", "1e3", "1e300"], ["0", "-1", "nan", "inf", "-inf", "soon"]),
    "--temperature": (["0", "0.7", "1", "1e300"], ["-0.1", "nan", "inf", "hot"]),
    "--min-tool-calls": (["0", "3", HUGE], ["-1", "some"]),
    "--keep-last": (["0", "3", HUGE], ["-1", "k"]),
    "--answer-reserve": (["0", "1024", HUGE], ["-1", "lots"]),
}
DEST = {"--n-ctx": "n_ctx", "--max-tokens": "max_tokens", "--max-turns": "max_turns", "--threads": "threads",
        "--search-results": "search_results", "--time-limit": "time_limit", "--temperature": "temperature",
        "--min-tool-calls": "min_tool_calls", "--keep-last": "keep_last", "--answer-reserve": "answer_reserve"}


@pytest.mark.parametrize("command", ["research", "eval", "serve", "mcp"])
@pytest.mark.parametrize(("flag", "value"), [(f, v) for f, (_, bad) in NUMERIC_FLAGS.items() for v in bad])
def test_a_bad_numeric_value_is_a_usage_error_naming_the_flag(command, flag, value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, f"{flag}={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and "Traceback" not in err, err


@pytest.mark.parametrize(("flag", "value"), [(f, v) for f, (good, _) in NUMERIC_FLAGS.items() for v in good])
def test_a_good_numeric_value_is_taken_as_its_number(flag, value):
    args = build_parser().parse_args(["research", "q", f"{flag}={value}"])
    assert getattr(args, DEST[flag]) == pytest.approx(float(value))


def test_plan_refuses_a_context_of_zero(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plan", "m.gguf", "--n-ctx", "0"])
    assert "argument --n-ctx: must be at least 1" in capsys.readouterr().err


def test_output_to_a_closed_pipe_ends_quietly(smollm2_gguf: Path):
    """``venus-edge plan --json | head -c 400`` printed a BrokenPipeError traceback. The pipe's reader is gone
    before the command writes, so the write certainly fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "venus_edge.cli", "plan", str(smollm2_gguf), "--json"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert done.returncode == EXIT_BROKEN_PIPE, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


def test_huge_values_run_or_are_refused_cleanly(smollm2_gguf: Path, docs_corpus: Path, capsys):
    """Huge limits are limits never reached: the run goes as without them (new tokens are bounded by the room left
    in n_ctx). A huge answer reserve cannot fit any window: one line naming the flags."""
    from venus_edge.cli import main

    base = ["research", "Which module reads TOML?", "--model", str(smollm2_gguf), "--corpus", str(docs_corpus),
            "--threads", "1", "--n-ctx", "1024", "--answer-reserve", "0", "--no-prompt-cache", "--quiet",
            "--max-turns", "1"]
    huge = ["--max-tokens", HUGE, "--search-results", HUGE, "--time-limit", "1e300", "--keep-last", HUGE]
    assert main([*base, *huge]) in (0, 1)
    assert "error" not in capsys.readouterr().err
    assert main([*base, "--answer-reserve", HUGE]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: --answer-reserve (99,999,999,999) must be smaller than --n-ctx (1,024)"), err
    assert err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("question", ["", "   ", "\n\t"])
def test_an_empty_question_is_refused_before_the_model_loads(question, tmp_path, capsys):
    from venus_edge.cli import main

    with pytest.raises(SystemExit) as usage:
        main(["research", question, "--model", str(tmp_path / "missing.gguf"), "--corpus", str(tmp_path)])
    assert usage.value.code == 2 and "the question is empty" in capsys.readouterr().err


@pytest.mark.parametrize("command, flag, make, says", [
    (["research", "q"], "--out", "folder", "is a folder; give a file in it"),
    (["research", "q"], "--out", "under a file", "cannot be written"),
    (["serve"], "--journal", "folder", "is a folder; give a file in it"),
    (["serve"], "--journal", "under a file", "cannot be written"),
    (["mcp"], "--journal", "folder", "is a folder; give a file in it"),
    (["research", "q"], "--record", "file", "is a file; give a folder"),
    (["research", "q"], "--record", "under a file", "cannot be written"),
], ids=lambda value: value if isinstance(value, str) else " ".join(value))
def test_an_output_that_cannot_be_written_is_refused_before_the_model_loads(command, flag, make, says, tmp_path,
                                                                           capsys):
    """`research --out FOLDER` ran the whole session, then said its trajectory was not saved; `serve --journal
    FOLDER` started and lost every session; `--record` into a file made every tool call an error the model read.
    Each is one usage line now, before any model loads (the model named does not exist)."""
    from venus_edge.cli import main

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    target = {"folder": tmp_path, "under a file": a_file / "runs.jsonl", "file": a_file}[make]
    with pytest.raises(SystemExit) as usage:
        main([*command, "--model", str(tmp_path / "missing.gguf"), "--corpus", str(tmp_path), flag, str(target)])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert f"{flag} {target} {says}" in err and "Traceback" not in err, err
