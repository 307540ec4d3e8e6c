"""Training data in: journals of real agent sessions, OpenAI-messages and ShareGPT rows in JSONL, JSON and parquet,
REDSearcher's raw and clean columns; every bad row counted with its reason, never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.eval.data import ANSWER_SPLIT
from venus_edge.protocol import observation
from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
from venus_edge.tools.base import ToolResult
from venus_edge.train.data import Sample, load_samples, sample_from_row

TOOL_TURN = ('<think>\nLook it up.\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": ["q"]}}\n'
             '</tool_call>')
ANSWER = "<think>\nFound it.\n</think>\n\n<answer>\n42\n</answer>"


def write_jsonl(path: Path, rows: list) -> Path:
    lines = [row if isinstance(row, (str, bytes)) else json.dumps(row) for row in rows]
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines) + b"\n")
    return path


def openai_row(**extra) -> dict:
    return {"question": "What is q?", "answer": f"42{ANSWER_SPLIT}forty-two", **extra, "messages": [
        {"role": "user", "content": "What is q?"},
        {"role": "assistant", "content": TOOL_TURN},
        {"role": "user", "content": observation("q is 42")},
        {"role": "assistant", "content": ANSWER},
    ]}


def test_openai_sharegpt_and_redsearcher_rows_become_the_same_sample(tmp_path):
    sharegpt = {"conversations": [
        {"from": "human", "value": "What is q?"},
        {"from": "gpt", "value": TOOL_TURN},
        {"from": "observation", "value": "q is 42"},  # a bare tool result: wrapped as the protocol's user message
        {"from": "gpt", "value": ANSWER},
    ], "gt": "42"}
    raw = {"meta": {"question": "What is q?", "answer": "42"}, "messages": openai_row()["messages"]}
    loaded = load_samples([write_jsonl(tmp_path / "rows.jsonl", [openai_row(), sharegpt, raw])])
    assert loaded.rejected == []
    first, second, third = loaded.samples
    assert first.messages == second.messages == third.messages
    assert first.messages[2] == {"role": "user", "content": "<tool_response>\nq is 42\n</tool_response>"}
    assert (first.question, first.answers) == ("What is q?", ("42", "forty-two"))
    assert second.answers == third.answers == ("42",)
    assert [s.source for s in loaded.samples] == ["rows.jsonl:row 1", "rows.jsonl:row 2", "rows.jsonl:row 3"]
    assert first.turns == 1  # (4 messages - 1) // 2, the recipe's count


def test_every_bad_row_is_counted_with_its_reason_and_the_good_rows_around_it_load(tmp_path):
    rows = [
        openai_row(),
        '{"messages": [{"role": "user", "content": "cut',
        "[" * 100_000 + "]" * 100_000,  # deeper than Python's parser goes
        {"question": "no messages at all"},
        {"messages": "not a list"},
        {"messages": [{"role": "user", "content": "Q?"}, {"role": "critic", "content": "hm"},
                      {"role": "assistant", "content": ANSWER}]},
        {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": None}]},
        {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": TOOL_TURN},
                      {"role": "user", "content": observation("x")}]},
        {"messages": [{"role": "assistant", "content": ANSWER}]},
        {"messages": []},
        [1, 2],
        openai_row(question="Last good row?"),
    ]
    loaded = load_samples([write_jsonl(tmp_path / "mixed.jsonl", rows)])
    assert [s.question for s in loaded.samples] == ["What is q?", "Last good row?"]
    assert [(r.source, r.reason.split(" (")[0].split(":")[0]) for r in loaded.rejected] == [
        ("mixed.jsonl:row 2", "broken row"),
        ("mixed.jsonl:row 3", "broken row"),
        ("mixed.jsonl:row 4", "no messages"),
        ("mixed.jsonl:row 5", "wrong messages"),
        ("mixed.jsonl:row 6", "wrong role"),
        ("mixed.jsonl:row 7", "wrong messages"),
        ("mixed.jsonl:row 8", "no answer"),
        ("mixed.jsonl:row 9", "no question"),
        ("mixed.jsonl:row 10", "no messages"),
        ("mixed.jsonl:row 11", "broken row"),
    ]
    assert "'critic'" in loaded.rejected[4].reason and "nested deeper" in loaded.rejected[1].reason
    assert loaded.reasons()["broken row"] == 3


@pytest.mark.parametrize("line", [
    '{"question": "' + "1" * 5000 + '", "x": ' + "1" * 5000 + "}",  # an int beyond int()'s digit limit
    '{"question": "q", "messages": [' * 2000,  # torn and deep
    '{"question": "q", "messages": ' + "[" * 600 + "]" * 600 + "}",  # the C parser reads it; every walk recursed
])
def test_json_that_python_cannot_hold_is_one_broken_row(tmp_path, line):
    loaded = load_samples([write_jsonl(tmp_path / "odd.jsonl", [line, openai_row()])])
    assert [s.source for s in loaded.samples] == ["odd.jsonl:row 2"]
    assert loaded.reasons() == {"broken row": 1} and "can hold" in loaded.rejected[0].reason, loaded.rejected


def test_bytes_that_are_not_utf8_cost_those_bytes_not_the_row(tmp_path, caplog):
    """Latin-1 bytes in a UTF-8 file (as a CSV reads them): the row loads with U+FFFD there, and a warning says so."""
    row = json.dumps(openai_row(question="What is caf\u00e9?")).encode().replace(b"caf\\u00e9", b"caf\xe9")
    assert b"caf\xe9" in row
    loaded = load_samples([write_jsonl(tmp_path / "latin1.jsonl", [row])])
    assert [s.question for s in loaded.samples] == ["What is caf\ufffd?"] and loaded.rejected == []
    assert "latin1.jsonl row 1: bytes that are not UTF-8" in caplog.text


def test_samples_over_the_maximum_length_are_rejected(tmp_path):
    long_row = openai_row()
    tool_exchange = [{"role": "assistant", "content": TOOL_TURN}, {"role": "user", "content": observation("x")}]
    long_row["messages"][1:1] = tool_exchange * 3
    loaded = load_samples([write_jsonl(tmp_path / "d.jsonl", [openai_row(), long_row])], max_turns=2)
    assert len(loaded.samples) == 1
    assert loaded.rejected[0].reason == "too long: 4 turns > 2"


def test_parquet_rows_with_list_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [openai_row(), {**openai_row(), "question": "Other?"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "sft.parquet")
    loaded = load_samples([tmp_path / "sft.parquet"])
    assert [s.question for s in loaded.samples] == ["What is q?", "Other?"]
    assert loaded.samples[0].messages == tuple(openai_row()["messages"][:2]) + (
        {"role": "user", "content": observation("q is 42")}, {"role": "assistant", "content": ANSWER})


def test_a_json_array_file(tmp_path):
    (tmp_path / "d.json").write_text(json.dumps([openai_row(), "junk"]))
    loaded = load_samples([tmp_path / "d.json"])
    assert len(loaded.samples) == 1 and loaded.rejected[0].reason == "broken row: not a JSON object"


class Lookup:
    name = "search"
    schema: ClassVar[dict[str, Any]] = {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {
        "query": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}}}

    def __call__(self, arguments):
        return ToolResult("q is 42")


def test_journal_sessions_of_the_real_agent_loop_are_samples(tmp_path):
    journal = tmp_path / "runs.jsonl"
    answered = Agent(ScriptedEngine([tool_call_turn("search", query=["q"]), answer_turn("42")]), [Lookup()],
                     trajectory_path=journal).run("What is q?")
    Agent(ScriptedEngine([tool_call_turn("search", query=["a"]), tool_call_turn("search", query=["b"])]), [Lookup()],
          config=AgentConfig(max_turns=1), trajectory_path=journal).run("Never answered?")
    with journal.open("ab") as handle:
        handle.write(b'{"record": "turn", "session_id": "x", "conte')  # torn by a crash
    loaded = load_samples([journal])
    [sample] = loaded.samples
    assert list(sample.messages) == answered.messages and sample.question == "What is q?" and sample.answers == ()
    reasons = sorted(r.reason.split(":")[0] for r in loaded.rejected)
    assert reasons == ["broken record", "no answer"]


def test_a_sample_round_trips_through_its_row():
    sample = Sample(tuple(openai_row()["messages"]), "What is q?", ("42", "forty-two"), "x:row 1")
    assert sample_from_row(sample.to_dict(), "x:row 1") == sample


def test_a_missing_file_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no training data"):
        load_samples([tmp_path / "nope.jsonl"])


@pytest.mark.parametrize(("row", "reason"), [
    ({"messages": [{"role": ["user"], "content": "q"}, {"role": "assistant", "content": ANSWER}]}, "wrong role"),
    ({"messages": [{"role": {"r": 1}, "content": "q"}, {"role": "assistant", "content": ANSWER}]}, "wrong role"),
    ({"messages": [{"role": None, "content": "q"}, {"role": "assistant", "content": ANSWER}]}, "wrong role"),
    ({"question": "Q?", "messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ANSWER}]},
     "no question"),
    ({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": ANSWER}]}, "no question"),
    ('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "broken row"),
])
def test_hostile_rows_are_rejected_with_a_reason(tmp_path, row, reason):
    loaded = load_samples([write_jsonl(tmp_path / "d.jsonl", [row, openai_row()])])
    assert len(loaded.samples) == 1
    assert [r.reason.split(":")[0] for r in loaded.rejected] == [reason]


def test_openai_function_calling_rows_are_written_in_the_protocol(tmp_path):
    row = {"messages": [
        {"role": "user", "content": "What is q?"},
        {"role": "assistant", "content": None, "reasoning_content": "Look it up.",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "search", "arguments": '{"query": ["q"]}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "q is 42"},
        {"role": "assistant", "content": "<answer>\n42\n</answer>", "reasoning_content": "Found it."},
    ]}
    [sample] = load_samples([write_jsonl(tmp_path / "d.jsonl", [row])]).samples
    assert [m["content"] for m in sample.messages] == [
        "What is q?", TOOL_TURN, observation("q is 42"), ANSWER]
    broken = {"messages": [row["messages"][0], {"role": "assistant", "content": None,
                                                "tool_calls": [{"function": {"name": "search", "arguments": "{bad"}}]}]}
    loaded = load_samples([write_jsonl(tmp_path / "b.jsonl", [broken])])
    assert "not JSON" in loaded.rejected[0].reason


@pytest.mark.parametrize("arguments, reason", [("[" * 50_000, "not JSON"), ("[" * 100 + "]" * 100, "nested deeper"),
                                               ('{"n": ' + "9" * 5_000 + "}", "not JSON")])
def test_tool_call_arguments_no_reader_can_hold_reject_their_row(tmp_path, arguments, reason):
    """'[' * 50000 as a call's arguments was a RecursionError traceback in clean and export-verl."""
    row = {"messages": [{"role": "user", "content": "What is q?"}, {"role": "assistant", "content": None,
                        "tool_calls": [{"function": {"name": "search", "arguments": arguments}}]}]}
    loaded = load_samples([write_jsonl(tmp_path / "d.jsonl", [row])])
    assert not loaded.samples and reason in loaded.rejected[0].reason


@pytest.mark.parametrize("result", ["q is 42", "<tool_response>\nq is 42\n</tool_response>\n",
                                    "  <tool_response>\nq is 42\n</tool_response>"])
def test_a_tool_result_is_one_tool_response_block_however_it_was_written(tmp_path, result):
    """Raw rows (REDSearcher's ``meta`` rows) give results unwrapped or with whitespace around the block."""
    row = {"meta": {"question": "What is q?", "answer": "42"}, "messages": [
        {"role": "user", "content": "What is q?"}, {"role": "assistant", "content": TOOL_TURN},
        {"role": "user", "content": result}, {"role": "assistant", "content": ANSWER}]}
    [sample] = load_samples([write_jsonl(tmp_path / "d.jsonl", [row])]).samples
    assert sample.messages[2] == {"role": "user", "content": observation("q is 42")}


def test_json_files_of_one_row_and_of_no_rows(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps(openai_row()))
    assert len(load_samples([tmp_path / "one.json"]).samples) == 1
    (tmp_path / "scalar.json").write_text("42")
    with pytest.raises(ValueError, match="list of rows"):
        load_samples([tmp_path / "scalar.json"])


def test_numpy_cells_from_pandas_rows():
    np = pytest.importorskip("numpy")
    row = {**openai_row(), "answer": np.array(["42", "forty-two"]), "messages": np.array(openai_row()["messages"])}
    assert sample_from_row(row).answers == ("42", "forty-two")
    assert sample_from_row({**openai_row(), "answer": np.array([])}).answers == ()
