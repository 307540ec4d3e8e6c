"""Each cleaning rule on a small hand-made row, then the whole pipeline and its report."""

from __future__ import annotations

import json

import pytest

from venus_edge.protocol import observation, render_system_prompt
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA
from venus_edge.train.clean import (
    CleanContext,
    Dropped,
    clean_samples,
    convert_search_results,
    drop_duplicate_calls,
    exact_match_judge,
    fix_text,
    keep_correct,
    normalize_arguments,
    parse_markdown_search,
    prune_unknown_tools,
    rebuild_turns,
    set_system_prompt,
    validate_structure,
)
from venus_edge.train.data import Sample

CONTEXT = CleanContext("2026-03-01")
SYSTEM = {"role": "system", "content": render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], "2026-03-01")}
QUESTION = {"role": "user", "content": "Who wrote tomllib?"}


def call(name: str, arguments: dict, reasoning: str = "Search it.") -> dict:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return {"role": "assistant", "content": f"<think>\n{reasoning}\n</think>\n\n<tool_call>\n{body}\n</tool_call>"}


def response(text: str = "result") -> dict:
    return {"role": "user", "content": observation(text)}


def answer(text: str = "Taneli Hukkinen") -> dict:
    return {"role": "assistant", "content": f"<think>\nFound it.\n</think>\n\n<answer>\n{text}\n</answer>"}


def sample(*messages: dict, answers: tuple[str, ...] = ("Taneli Hukkinen",)) -> Sample:
    return Sample(tuple(messages), "Who wrote tomllib?", answers, "test:row 1")


def contents(s: Sample) -> list[str]:
    return [m["content"] for m in s.messages]


# ------------------------------------------------------------------------------------------------ each rule


def test_fix_text_replaces_lone_surrogates():
    cleaned = fix_text(sample(SYSTEM, QUESTION, response("half \ud83d emoji"), answer()), CONTEXT)
    assert contents(cleaned)[2] == observation("half \ufffd emoji")
    cleaned.messages[2]["content"].encode("utf-8")  # encodable now


@pytest.mark.parametrize("first", [
    [],  # no system message: one is added
    [{"role": "system", "content": "You are a helpful assistant."}],  # another system prompt: replaced
    [{"role": "system", "content": SYSTEM["content"].replace("2026-03-01", "2025-01-01")}],  # another date
])
def test_set_system_prompt_writes_the_runtimes_prompt_with_the_date(first):
    cleaned = set_system_prompt(sample(*first, QUESTION, answer()), CONTEXT)
    assert list(cleaned.messages) == [SYSTEM, QUESTION, answer()]
    assert cleaned.messages[0]["content"].endswith("Current date: 2026-03-01\n")


MARKDOWN_SEARCH = """A Google search for 'tomllib author' found 2 results:

## Web Results
1. [tomllib — Parse TOML files [Python 3.11]](https://docs.python.org/3/library/tomllib.html)
Date published: 2022-10-24
The tomllib module was written by Taneli Hukkinen.

2. [TOML (language)](https://en.wikipedia.org/wiki/TOML_(file_format))
TOML is a file format.
Second line of the snippet.
A Google search for "toml spec" found 1 results:

## Web Results
1. [TOML v1.0.0](https://toml.io/en/v1.0.0) Tom's Obvious Minimal Language.
"""


def test_markdown_search_results_become_the_search_tools_json():
    blocks = parse_markdown_search(MARKDOWN_SEARCH)
    assert blocks == [
        {"query": "tomllib author", "web_page_info_list": [
            {"title": "tomllib — Parse TOML files [Python 3.11]", "url": "https://docs.python.org/3/library/tomllib.html",
             "snippet": "Date published: 2022-10-24\n\nThe tomllib module was written by Taneli Hukkinen."},
            {"title": "TOML (language)", "url": "https://en.wikipedia.org/wiki/TOML_(file_format)",
             "snippet": "TOML is a file format.\nSecond line of the snippet."},
        ]},
        {"query": "toml spec", "web_page_info_list": [
            {"title": "TOML v1.0.0", "url": "https://toml.io/en/v1.0.0", "snippet": "Tom's Obvious Minimal Language."},
        ]},
    ]
    converted = convert_search_results(sample(SYSTEM, QUESTION, call("search", {"query": ["x"]}),
                                              response(MARKDOWN_SEARCH), answer()), CONTEXT)
    observed = contents(converted)[3].removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
    assert json.loads(observed) == blocks


@pytest.mark.parametrize("text", [
    '[{"query": "x", "web_page_info_list": []}]',  # already the JSON shape
    "The useful information in https://a.example for user goal g as follows:\n\nEvidence in page:\n...",  # a visit
])
def test_other_tool_responses_are_left_alone(text):
    original = sample(SYSTEM, QUESTION, call("search", {"query": ["x"]}), response(text), answer())
    assert convert_search_results(original, CONTEXT) == original


def test_calls_of_unknown_tools_are_pruned_with_their_responses():
    python = {"role": "assistant", "content": "<think>\nCompute.\n</think>\n<tool_call>\n{\"name\": "
                                              "\"PythonInterpreter\", \"arguments\": {}}\n<code>print(1)</code>\n"
                                              "</tool_call>"}
    original = sample(SYSTEM, QUESTION, python, response("1"), call("search", {"query": ["x"]}), response(), answer())
    pruned = prune_unknown_tools(original, CONTEXT)
    assert list(pruned.messages) == [SYSTEM, QUESTION, call("search", {"query": ["x"]}), response(), answer()]


def test_turns_are_rebuilt_canonically_with_the_runtimes_parser():
    slips = [
        {"role": "assistant", "content": "<think>\nSearch it.\n</think>\n<tool_call>\n{'name': 'search', 'arguments': "
                                         "{'query': ['x'],}}\n</tool_call>"},
        response(),
        {"role": "assistant", "content": "Search it.\n</think>\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": "
                                         "{\"query\": [\"y\"]}}\n</tool_call>  "},
        response(),
        {"role": "assistant", "content": "<think>\nFound it.</think>\n<answer>Taneli Hukkinen</answer>"},
    ]
    rebuilt = rebuild_turns(sample(SYSTEM, QUESTION, *slips), CONTEXT)
    assert list(rebuilt.messages) == [SYSTEM, QUESTION, call("search", {"query": ["x"]}), response(),
                                      call("search", {"query": ["y"]}), response(), answer()]


@pytest.mark.parametrize("broken", [
    "<think>\nSearch.\n</think>\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": \n</tool_call>",  # invalid JSON
    # no reasoning
    "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": [\"x\"]}}\n</tool_call>",
    "<think>\nHmm.\n</think>\n\nI will search later.",  # no action
])
def test_a_broken_middle_turn_is_removed_with_its_response(broken):
    rebuilt = rebuild_turns(sample(SYSTEM, QUESTION, {"role": "assistant", "content": broken}, response("lost"),
                                   call("search", {"query": ["y"]}), response(), answer()), CONTEXT)
    assert list(rebuilt.messages) == [SYSTEM, QUESTION, call("search", {"query": ["y"]}), response(), answer()]


@pytest.mark.parametrize("last", [call("search", {"query": ["x"]}), {"role": "assistant", "content": "<think>\nDone.\n"
                                                                                                     "</think>\n\n<answer>\n\n</answer>"}])
def test_a_sample_whose_last_turn_is_not_an_answer_is_dropped(last):
    with pytest.raises(Dropped, match=r"^no answer"):
        rebuild_turns(sample(SYSTEM, QUESTION, last), CONTEXT)


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"queries": "tomllib author"}, {"query": ["tomllib author"]}),
    ({"query": '["a", "b"]'}, {"query": ["a", "b"]}),
    ({"query": ["a"], "num_results": 5}, {"query": ["a"]}),
])
def test_search_arguments_are_coerced_to_the_schema(arguments, expected):
    normalized = normalize_arguments(sample(SYSTEM, QUESTION, call("search", arguments), response(), answer()), CONTEXT)
    assert normalized.messages[2] == call("search", expected)


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"urls": "https://a.example", "goal": ["find the author", "ignored"]},
     {"url": ["https://a.example"], "goal": "find the author"}),
    ({"url": ["https://a.example"], "goal": "g"}, {"url": ["https://a.example"], "goal": "g"}),
])
def test_visit_arguments_are_coerced_to_the_schema(arguments, expected):
    normalized = normalize_arguments(sample(SYSTEM, QUESTION, call("visit", arguments), response(), answer()), CONTEXT)
    call_json = contents(normalized)[2].split("<tool_call>\n")[1].split("\n</tool_call>")[0]
    assert json.loads(call_json)["arguments"] == expected


def test_duplicate_calls_are_dropped_with_their_responses_after_coercion():
    original = sample(SYSTEM, QUESTION, call("search", {"query": ["q"]}), response("first"),
                      call("search", {"query": "q"}, "Again."), response("again"),  # the same call as a bare string
                      call("search", {"query": ["q", "r"]}), response("new"), answer())
    deduplicated = drop_duplicate_calls(original, CONTEXT)
    assert contents(deduplicated)[3::2] == [observation("first"), observation("new")]


@pytest.mark.parametrize(("messages", "reason"), [
    ([SYSTEM, QUESTION, call("search", {"query": ["x"]}), call("search", {"query": ["y"]}), response(), answer()],
     "message 3 is assistant, expected user"),
    ([SYSTEM, QUESTION, call("search", {"query": ["x"]}), response()], "ends with a tool response"),
    ([SYSTEM, QUESTION, call("search", {"query": ["x"]}), QUESTION, answer()], "not one <tool_response> block"),
    ([SYSTEM, QUESTION, answer(), response(), answer()], "answers early"),
    ([QUESTION, answer()], "2 messages"),
    ([SYSTEM, response(), answer()], "not the question"),
    ([SYSTEM, QUESTION, {"role": "assistant", "content": "<think>\nx\n</think>\n\n<answer>\na\n</answer> trailing"}],
     "text_after_action"),
])
def test_structure_validation_drops_what_the_protocol_does_not_allow(messages, reason):
    with pytest.raises(Dropped, match=reason):
        validate_structure(sample(*messages), CONTEXT)


def test_the_correctness_filter_uses_the_judge():
    right = sample(SYSTEM, QUESTION, answer("taneli hukkinen."))
    wrong = sample(SYSTEM, QUESTION, answer("Guido"))
    judged = CleanContext("2026-03-01", judge=exact_match_judge)
    assert keep_correct(right, judged) == right
    with pytest.raises(Dropped, match="wrong answer"):
        keep_correct(wrong, judged)
    with pytest.raises(Dropped, match="no ground-truth"):
        keep_correct(sample(SYSTEM, QUESTION, answer(), answers=()), judged)
    assert keep_correct(wrong, CONTEXT) == wrong  # no judge: kept

    class Verdict:  # an LLM judge's verdict (venus_edge.eval.judge.JudgeVerdict) is read through .correct
        def __init__(self, correct):
            self.correct = correct

    seen = []
    llm = CleanContext("2026-03-01", judge=lambda q, a, answers: seen.append((q, a, answers)) or Verdict(False))
    with pytest.raises(Dropped):
        keep_correct(right, llm)
    assert seen == [("Who wrote tomllib?", "taneli hukkinen.", ("Taneli Hukkinen",))]


# ------------------------------------------------------------------------------------------------ the pipeline


def test_a_raw_open_data_row_comes_out_in_the_trained_format_with_a_report():
    raw = sample(
        {"role": "user", "content": "Who wrote tomllib?"},
        {"role": "assistant", "content": "<think>\nSearch it.\n</think>\n<tool_call>\n{\"name\": \"search\", "
                                         "\"arguments\": {\"queries\": \"tomllib author\"}}\n</tool_call>"},
        {"role": "user", "content": observation(MARKDOWN_SEARCH)},
        {"role": "assistant", "content": "<think>\nRun code.\n</think>\n<tool_call>\n{\"name\": \"python\", "
                                         "\"arguments\": {\"code\": \"1\"}}\n</tool_call>"},
        response("1"),
        {"role": "assistant", "content": "<think>\nSearch again.\n</think>\n<tool_call>\n{\"name\": \"search\", "
                                         "\"arguments\": {\"query\": [\"tomllib author\"]}}\n</tool_call>"},
        response("same"),
        {"role": "assistant", "content": "<think>\nFound it.\n</think>\n<answer>\nTaneli Hukkinen\n</answer>"},
    )
    broken = sample(SYSTEM, QUESTION, call("search", {"query": ["x"]}), response())
    kept, report = clean_samples([raw, broken], CONTEXT)
    [cleaned] = kept
    assert list(cleaned.messages) == [
        SYSTEM, QUESTION, call("search", {"query": ["tomllib author"]}),
        response(json.dumps(parse_markdown_search(MARKDOWN_SEARCH), ensure_ascii=False)), answer()]
    assert (report.read, report.kept) == (2, 1)
    assert report.changed["set_system_prompt"] == 1 and report.changed["convert_search_results"] == 1
    assert report.changed["prune_unknown_tools"] == 1 and report.changed["drop_duplicate_calls"] == 1
    assert report.changed["rebuild_turns"] == 1 and report.changed["normalize_arguments"] == 1
    assert dict(report.dropped) == {"rebuild_turns": 1}
    table = report.markdown()
    assert "| rebuild_turns | 1 | 1 |" in table and "| rebuild_turns | no answer | 1 | test:row 1: no answer" in table
    assert report.to_dict()["reasons"][0]["rule"] == "rebuild_turns"
    again, second = clean_samples(kept, CONTEXT)
    assert again == kept and not second.changed, "cleaning is idempotent"


def test_only_responses_to_a_search_call_are_converted():
    """A visited page that quotes search results keeps its text."""
    page = "Notes.\n" + MARKDOWN_SEARCH
    visit = call("visit", {"url": ["https://a.example"], "goal": "g"})
    original = sample(SYSTEM, QUESTION, visit, response(page), answer())
    assert convert_search_results(original, CONTEXT) == original


def test_a_call_written_inside_the_reasoning_moves_out_of_it_once():
    inside = {"role": "assistant", "content": "<think>\nSearch it. <tool_call>\n{\"name\": \"search\", \"arguments\": "
                                              "{\"query\": [\"x\"]}}\n</tool_call>\n</think>"}
    rebuilt = rebuild_turns(sample(SYSTEM, QUESTION, inside, response(), answer()), CONTEXT)
    assert rebuilt.messages[2]["content"].count("<tool_call>") == 1
    validate_structure(rebuilt, CONTEXT)


@pytest.mark.parametrize(("name", "arguments"), [
    ("visit", {"goal": "g"}),  # no url
    ("search", {"query": []}),
    ("search", {"query": [""]}),
    ("search", {"query": None}),
    ("search", {"query": {"a": 1}}),
    ("visit", {"url": ["https://a.example"], "goal": None}),
    ("visit", {"url": ["https://a.example"], "goal": []}),
    ("visit", {"url": ["https://a.example"], "goal": "  "}),
])
def test_calls_whose_arguments_stay_invalid_are_removed_with_their_responses(name, arguments):
    normalized = normalize_arguments(sample(SYSTEM, QUESTION, call(name, arguments), response("bad"),
                                            call("search", {"query": ["ok"]}), response("good"), answer()), CONTEXT)
    expected = [call("search", {"query": ["ok"]})["content"], observation("good"), answer()["content"]]
    assert contents(normalized)[2:] == expected


@pytest.mark.parametrize(
    ("first", "again"),
    [
        (("search", {"query": ["a", "b"]}), ("search", {"query": ["b", "a"]})),
        (("search", {"query": ["a"]}), ("search", {"query": [" a "]})),
        (
            ("visit", {"url": ["https://a.example"], "goal": "one"}),
            ("visit", {"url": "https://a.example", "goal": "two"}),
        ),
    ],
)
def test_repeats_are_counted_as_the_reference_counts_them(first, again):
    original = sample(SYSTEM, QUESTION, call(*first), response("1"), call(*again, "Again."), response("2"), answer())
    assert contents(drop_duplicate_calls(original, CONTEXT))[3:] == [observation("1"), answer()["content"]]


def test_the_rl_style_writes_the_rl_prompt_and_dated_hits():
    """``observation_style="rl"``: the RL rollouts' system prompt and search hits with a ``date`` key of their own,
    ``""`` where the result has none (``tools.observation_styles``)."""
    rl = CleanContext("2026-03-01", observation_style="rl")
    cleaned = set_system_prompt(sample(QUESTION, answer()), rl)
    assert cleaned.messages[0]["content"] == render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], "2026-03-01",
                                                                 style="rl")
    assert '"name": "PythonInterpreter"' in cleaned.messages[0]["content"]
    hits = parse_markdown_search(MARKDOWN_SEARCH, "rl")[0]["web_page_info_list"]  # type: ignore[index]
    assert hits[0]["date"] == "2022-10-24" and hits[0]["snippet"].startswith("The tomllib module")
    assert hits[1]["date"] == ""
    with pytest.raises(ValueError, match="inference, rl"):
        CleanContext("2026-03-01", observation_style="sft")
