"""``--draft lookup|MODEL.gguf|off`` (speculative decoding, issue 27) on the command line: the flag on every command
that loads the in-process engine, its usage errors, the refusals where it does not apply, and a draft GGUF with
another vocabulary as a one-line error."""

from __future__ import annotations

import pytest

from venus_edge.cli import build_parser, main
from venus_edge.session import SessionSettings, SetupError, _load_engine


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------------------------- the flag


@pytest.mark.parametrize("command", [["research", "q"], ["eval", "pydocs"], ["serve"], ["mcp"], ["bench", "m.gguf"]])
def test_draft_takes_lookup_off_or_a_file_on_every_command_that_loads_the_engine(command, tmp_path):
    draft_file = tmp_path / "draft.gguf"
    draft_file.write_bytes(b"GGUF")  # a file is taken as given; whether it loads is the engine's to say
    parser = build_parser()
    assert parser.parse_args(command).draft is None  # off by default
    assert parser.parse_args([*command, "--draft", "lookup"]).draft == "lookup"
    assert parser.parse_args([*command, "--draft", "off"]).draft is None
    assert parser.parse_args([*command, "--draft", str(draft_file)]).draft == str(draft_file)


@pytest.mark.parametrize("command", [["research", "q"], ["eval", "pydocs"], ["serve"], ["bench", "m.gguf"]])
def test_a_draft_that_is_no_file_is_a_usage_error_that_says_what_to_give(command, tmp_path, capsys):
    for value, reason in ((str(tmp_path / "missing.gguf"), f"no file {tmp_path / 'missing.gguf'}"),
                          ("Lookup", "no file Lookup"), ("", "empty"), (" ", "empty")):
        with pytest.raises(SystemExit) as usage:
            build_parser().parse_args([*command, "--draft", value])
        assert usage.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --draft: {reason}; give lookup, off or a GGUF path" in err, err
        assert "Traceback" not in err


def test_a_folder_as_draft_names_the_gguf_inside_it(tmp_path, capsys):
    (tmp_path / "small.gguf").write_bytes(b"GGUF")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["research", "q", "--draft", str(tmp_path)])
    err = capsys.readouterr().err
    assert f"argument --draft: {tmp_path}: it is a folder" in err, err
    assert f"give the file inside it: {tmp_path / 'small.gguf'}" in err and "lookup or off" in err, err


def test_the_draft_reaches_the_settings_and_the_bench_configs(tmp_path):
    argv = ["research", "q", "--corpus", str(tmp_path), "--draft", "lookup"]
    assert SessionSettings.from_args(build_parser().parse_args(argv)).draft == "lookup"
    assert SessionSettings().draft is None
    from venus_edge.bench.measure import BenchConfig

    assert BenchConfig(tmp_path / "m.gguf").draft is None  # bench's field, passed to the engine it measures


# ---------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("flags", [
    ["research", "Which module reads TOML?", "--samples", "2"],
    ["research", "Which module reads TOML?", "--engine", "openai", "--base-url", "http://127.0.0.1:9"],
    ["eval", "pydocs", "--limit", "1", "--k", "2", "--parallel", "--no-plot"],
    ["serve", "--slots", "2", "--port", "0"],
], ids=["samples", "openai", "eval-parallel", "serve-slots"])
def test_draft_where_it_does_not_apply_is_refused_before_any_model_loads(flags, docs_corpus, tmp_path, capsys):
    """Several samples at once (the batched engine does not draft yet) and a model server: one line naming --draft
    and what to do, as ``--kv-type`` there. The model does not exist: the refusal comes first."""
    out = ["--out", str(tmp_path / "out")] if flags[0] == "eval" else []
    journal = ["--journal", str(tmp_path / "j.jsonl")] if flags[0] == "serve" else []
    code = main([*flags, "--model", "/nonexistent/model.gguf", "--corpus", str(docs_corpus), "--draft", "lookup",
                 *out, *journal])
    assert code == 3
    message = _error_line(capsys)
    assert message.startswith("error: --draft (speculative decoding)") and "does not apply" in message, message
    assert "drop --draft" in message and "not found" not in message, message


def test_the_python_api_refuses_draft_with_several_samples(smollm2_gguf, tmp_path):
    settings = SessionSettings(model=str(smollm2_gguf), replay=tmp_path, draft="lookup")
    with pytest.raises(SetupError, match="batched engine does not draft"):
        _load_engine(settings, 2)


def test_a_draft_gguf_with_another_vocabulary_is_one_error_line(smollm2_gguf, tiny_qwen3_gguf, docs_corpus, capsys):
    """The tiny Qwen3 (the Qwen tokenizer) cannot draft for SmolLM2: the engine's ModelLoadError, shown as every
    load error is (exit code 3, one line, no traceback), naming the draft file and both vocabularies."""
    code = main(["research", "Which module reads TOML?", "--model", str(smollm2_gguf), "--corpus", str(docs_corpus),
                 "--draft", str(tiny_qwen3_gguf), "--threads", "1", "--max-turns", "1", "--max-tokens", "8",
                 "--no-prompt-cache", "--quiet"])
    assert code == 3
    message = _error_line(capsys)
    assert str(tiny_qwen3_gguf) in message and "vocabulary" in message, message
    assert smollm2_gguf.name in message and "same" in message, message
