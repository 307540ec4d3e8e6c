"""`venus-edge quantize` and `venus-edge inspect`, run in-process through `venus_edge.cli.main`."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import subprocess
import sys

import pytest

from venus_edge.cli import main
from venus_edge.engines.base import GREEDY
from venus_edge.engines.llama_cpp import LlamaCppEngine


@pytest.fixture(scope="module")
def quantize_run(tiny_checkpoint, tmp_path_factory):
    """One `venus-edge quantize` run on the tiny checkpoint: (exit code, stdout, stderr, out folder)."""
    out_dir = tmp_path_factory.mktemp("cli") / "out"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["quantize", str(tiny_checkpoint), "--types", "Q4_K_M,q8_0", "--out", str(out_dir),
                     "--n-ctx", "32", "--agentic-tokens", "2"])
    return code, stdout.getvalue(), stderr.getvalue(), out_dir


def test_quantize_writes_files_and_table(quantize_run):
    code, stdout, stderr, out_dir = quantize_run
    assert code == 0, stderr
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["checkpoint-Q4_K_M.gguf", "checkpoint-Q8_0.gguf", "checkpoint-f16.gguf", "table.json", "table.md"]
    assert "[1/5] convert" in stderr and "[5/5] verify checkpoint-Q8_0.gguf" in stderr and "no fallbacks" in stderr
    assert "| checkpoint-Q4_K_M.gguf | Q4_K_M |" in stdout
    table = json.loads((out_dir / "table.json").read_text())
    rows = {row["file_type"]: row for row in table["rows"]}
    assert set(rows) == {"F16", "Q4_K_M", "Q8_0"} and table["calibration_tokens"] == 32
    assert 0 < rows["Q8_0"]["mean_kl"] < rows["Q4_K_M"]["mean_kl"], table
    assert rows["Q4_K_M"]["agentic_total"] == 4 and rows["Q4_K_M"]["fallbacks"] == []
    assert (out_dir / "table.md").read_text() in stdout


def test_runtime_engine_runs_the_q4_k_m_model(quantize_run, real_model_run):
    """The runtime's LlamaCppEngine loads the quantized tiny model and generates greedily."""
    model = quantize_run[3] / "checkpoint-Q4_K_M.gguf"
    with LlamaCppEngine(model, n_ctx=256, **real_model_run.engine_args()) as engine:
        assert engine.model_info()["file_type"] == "Q4_K_M"
        completion = engine.generate(engine.tokenize("<|im_start|>user\nHello<|im_end|>\n"),
                                     sampling=dataclasses.replace(GREEDY, max_tokens=5))
    # random weights: the end token may be the first one picked (decoded, not kept)
    ended = completion.finish_reason == "eog"
    assert completion.finish_reason in ("eog", "length") and len(completion.token_ids) == (
        completion.stats.tokens_decoded - ended) <= 5 and completion.stats.tokens_decoded >= 1


def test_inspect_prints_facts(quantize_run, capsys):
    model = quantize_run[3] / "checkpoint-Q4_K_M.gguf"
    assert main(["inspect", str(model)]) == 0
    out = capsys.readouterr().out
    assert "architecture qwen3, file type MOSTLY_Q4_K_M, 24 tensors" in out
    assert "pre qwen2, 151,936 tokens" in out and "151,387 merges" in out
    assert "tensor types: F32 9, Q4_K 12, Q6_K 3" in out
    assert main(["inspect", str(model), "--json", "--tensors"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["tensor_types"] == {"F32": 9, "Q4_K": 12, "Q6_K": 3} and len(facts["tensors"]) == 24


def test_inspect_truncated_file_exits_3_with_path(quantize_run, tmp_path, capsys):
    broken = tmp_path / "half.gguf"
    broken.write_bytes((quantize_run[3] / "checkpoint-Q8_0.gguf").read_bytes()[:1_000_000])
    assert main(["inspect", str(broken)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(broken) in err and "truncated" in err


def test_quantize_missing_checkpoint_exits_3(tmp_path, capsys):
    assert main(["quantize", str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 3
    assert "nope" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_quantize_into_a_file_or_with_a_calibration_text_that_is_not_utf8_says_what_to_give(tiny_checkpoint,
                                                                                             tmp_path, capsys):
    """`--out FILE` said "Choose a writable folder that exists" while --help says the folder is created if missing;
    a Latin-1 calibration file gave the codec's own error."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert main(["quantize", str(tiny_checkpoint), "--types", "Q8_0", "--out", str(a_file)]) == 3
    assert "it is a file; --out names a folder (created if missing)" in capsys.readouterr().err
    latin1 = tmp_path / "calibration.txt"
    latin1.write_bytes("Le caf\u00e9 est ferm\u00e9.".encode("latin-1"))
    assert main(["quantize", str(tiny_checkpoint), "--types", "Q8_0", "--calibration", str(latin1), "--out",
                 str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "it is not UTF-8 (byte 6); give a UTF-8 text file" in err and "Traceback" not in err, err


@pytest.mark.parametrize("text, message", [("", "is empty"), (" \n\t", "is empty"),
                                           ("a", "at least 2 are needed; give a longer --calibration text")])
def test_a_calibration_text_too_short_to_score_is_one_line(tiny_checkpoint, tmp_path, capsys, text, message):
    """An empty or one-character calibration file was a ValueError traceback from the check."""
    calibration = tmp_path / "calibration.txt"
    calibration.write_text(text)
    assert main(["quantize", str(tiny_checkpoint), "--types", "Q8_0", "--calibration", str(calibration), "--out",
                 str(tmp_path / "out"), "--agentic-tokens", "0", "--quiet"]) == 3
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


@pytest.mark.parametrize("n_ctx", ["7", "1000000000"])
def test_a_calibration_window_out_of_range_is_a_usage_error(tiny_checkpoint, tmp_path, capsys, n_ctx):
    """--n-ctx 1000000000 said "cannot read GGUF ... std::bad_alloc. Re-create the file" of a sound file."""
    with pytest.raises(SystemExit) as exit_info:
        main(["quantize", str(tiny_checkpoint), "--types", "Q8_0", "--out", str(tmp_path / "out"), "--n-ctx", n_ctx])
    assert exit_info.value.code == 2
    assert "--n-ctx must be between 8 and 2,048" in capsys.readouterr().err


def test_quantize_unknown_type_is_a_usage_error(tiny_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["quantize", str(tiny_checkpoint), "--types", "Q4_K_M,Q3_K_XL", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: venus-edge quantize" in err and "Q3_K_XL" in err
    assert not (tmp_path / "out").exists()


def test_cli_parser_does_not_import_gguf():
    """Registering the quantize commands imports neither gguf nor llama.cpp nor torch."""
    code = ("import sys; from venus_edge.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('gguf', 'llama_cpp', 'torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout


def test_research_command_runs_the_q4_k_m_model(quantize_run, tmp_path, capsys):
    """`venus-edge research --model` loads the quantized tiny model and runs a turn (random weights: no answer)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "note.txt").write_text("The default pickle protocol in Python 3.11 is 4.\n", encoding="utf-8")
    model = quantize_run[3] / "checkpoint-Q4_K_M.gguf"
    code = main(["research", "What is the default pickle protocol?", "--model", str(model), "--corpus", str(corpus),
                 "--max-turns", "1", "--max-tokens", "4", "--n-ctx", "2048", "--json"])
    captured = capsys.readouterr()
    assert code == 1, captured.err  # the session ended without an answer, as it must with random weights
    assert json.loads(captured.out)["answer"] is None
    assert "turn 1" in captured.err
