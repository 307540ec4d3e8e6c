"""Text that is not valid Unicode, from every way it comes in, is made valid (U+FFFD) before it is stored, sent or
tokenized, and the one function that does it (``venus_edge.text.valid_text``) says what it replaced."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from venus_edge.agent import Agent
from venus_edge.cli import main
from venus_edge.eval.data import load_examples
from venus_edge.jsonl import append_record, iter_records, write_records
from venus_edge.testing import ScriptedEngine, answer_turn
from venus_edge.text import REPLACEMENT_CHARACTER, shown_path, valid_text
from venus_edge.trajectory import read_journal

# What Python makes of `venus-edge research $'\xff\xfe question'` (argv is decoded with surrogateescape).
UNDECODABLE_ARGUMENT = b"\xff\xfe question".decode("utf-8", "surrogateescape")


def test_lone_surrogates_become_the_replacement_character_and_split_pairs_are_joined(caplog):
    assert valid_text("half \ud83d an emoji") == f"half {REPLACEMENT_CHARACTER} an emoji"
    assert valid_text(UNDECODABLE_ARGUMENT) == "\ufffd\ufffd question"
    assert valid_text("a \ud83d\ude00 pair") == "a \U0001f600 pair"  # UTF-16 halves side by side: one character
    nested = {"k\udc80": ["x\ud800", ("t\udfff", 3)], "n": None}
    assert valid_text(nested) == {"k\ufffd": ["x\ufffd", ("t\ufffd", 3)], "n": None}
    with caplog.at_level(logging.WARNING, logger="venus_edge.text"):
        valid_text(nested, source="the test's value")
    assert "the test's value: 3 characters that are not valid Unicode" in caplog.text and "U+FFFD" in caplog.text


def test_valid_text_is_returned_as_it_is_and_nothing_is_said(caplog):
    value = {"question": "naïve \U0001f600 \u2028 ok", "ids": [1, 2, 3]}
    with caplog.at_level(logging.WARNING, logger="venus_edge.text"):
        assert valid_text(value, source="x") is value
    assert caplog.text == ""


def test_a_path_is_shown_with_its_undecodable_bytes_escaped_not_repaired():
    assert shown_path(Path(b"/tmp/\xffrun.jsonl".decode("utf-8", "surrogateescape"))) == "/tmp/\\xffrun.jsonl"


def test_the_jsonl_writer_never_writes_a_line_that_is_not_utf8(tmp_path, caplog):
    """The last line of defence: a lone surrogate that got past every boundary is stored as U+FFFD, with a warning
    naming the file, so that no reader of the journal ever meets it (it used to be stored as a ``\\ud800`` escape,
    which every reader read back as the lone surrogate)."""
    path = tmp_path / "records.jsonl"
    with caplog.at_level(logging.WARNING, logger="venus_edge.text"):
        append_record(path, {"question": "q \ud800", "fine": "é"})
        write_records(tmp_path / "whole.jsonl", [{"answer": "\udcff"}])
    assert path.read_bytes().decode("utf-8") == '{"question": "q \ufffd", "fine": "é"}\n'
    assert [record for _, record, _, _ in iter_records(path)] == [{"question": "q \ufffd", "fine": "é"}]
    assert [record for _, record, _, _ in iter_records(tmp_path / "whole.jsonl")] == [{"answer": "\ufffd"}]
    assert f"record for {path}: 1 character that is not valid Unicode" in caplog.text


def test_a_question_that_is_not_valid_unicode_reaches_the_model_and_the_journal_valid(tmp_path, caplog):
    """Python callers, the server, MCP and the CLI all start sessions through the agent: the question the model
    sees, the events carry and the journal stores is the repaired one."""
    engine = ScriptedEngine([answer_turn("42")])
    path = tmp_path / "runs.jsonl"
    with caplog.at_level(logging.WARNING, logger="venus_edge.text"):
        events = list(Agent(engine, [], trajectory_path=path).events(UNDECODABLE_ARGUMENT))
    assert events[0].question == "\ufffd\ufffd question"
    assert "\ufffd\ufffd question" in engine.prompts[0]
    [trajectory] = read_journal(path).trajectories
    assert trajectory.question == "\ufffd\ufffd question" and trajectory.messages[1]["content"] == trajectory.question
    assert "the question: 2 characters that are not valid Unicode" in caplog.text
    path.read_bytes().decode("utf-8")  # every byte of the journal is UTF-8


def test_evaluation_and_training_data_rows_are_made_valid_with_the_row_named(tmp_path, caplog):
    """``read_data_rows`` (eval sets and train data): a ``\\ud800`` escape in a JSONL row and a byte that is not
    UTF-8 in a CSV field become U+FFFD; the other rows and fields are untouched."""
    jsonl = tmp_path / "set.jsonl"
    jsonl.write_bytes(b'{"question": "who \\ud800?", "answer": "me"}\n{"question": "fine?", "answer": "yes"}\n')
    csv = tmp_path / "set.csv"
    csv.write_bytes(b"question,answer\nwhat \xff?,it\nok?,yes\n")
    with caplog.at_level(logging.WARNING, logger="venus_edge.text"):
        from_jsonl = load_examples(jsonl).examples
        from_csv = load_examples(csv).examples
    assert [e.question for e in from_jsonl] == ["who \ufffd?", "fine?"]
    assert [e.question for e in from_csv] == ["what \ufffd?", "ok?"] and from_csv[0].answers == ("it",)
    assert f"{jsonl} row 1: 1 character" in caplog.text and f"{csv} row 2: 1 character" in caplog.text


@pytest.mark.parametrize("flag", ["--api-key", None])
def test_an_api_key_that_is_not_utf8_is_refused_before_anything_loads(tmp_path, monkeypatch, capsys, flag):
    """A secret is never repaired (the repaired key would not match): the flag or the environment variable is
    refused with exit code 2, whichever carried it."""
    key = b"k\xffey".decode("utf-8", "surrogateescape")
    argv = ["research", "q", "--corpus", str(tmp_path), "--engine", "openai", "--base-url", "http://127.0.0.1:9"]
    if flag:
        argv += [flag, key]
    else:
        monkeypatch.setenv("VENUS_EDGE_API_KEY", key)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "$VENUS_EDGE_API_KEY) holds bytes that are not UTF-8" in capsys.readouterr().err


def test_the_servers_key_that_is_not_utf8_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VENUS_EDGE_SERVER_KEY", b"\xfe".decode("utf-8", "surrogateescape"))
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--corpus", str(tmp_path), "--model", str(tmp_path / "absent.gguf")])
    assert exited.value.code == 2
    assert "$VENUS_EDGE_SERVER_KEY) holds bytes that are not UTF-8" in capsys.readouterr().err

