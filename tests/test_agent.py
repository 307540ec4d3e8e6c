"""The agent loop's guards, limits and journal, driven by a scripted engine (canned turns by call index) and the
real corpus tools. A real model runs the same loop in tests/test_research.py."""

from __future__ import annotations

import io
import itertools
import json
from typing import Any, ClassVar

import pytest

from venus_edge import protocol
from venus_edge import result as result_module
from venus_edge.agent import Agent, AgentConfig
from venus_edge.cli import _print_result, _Progress
from venus_edge.errors import ContextOverflowError
from venus_edge.events import ErrorRaised, LimitReached, ToolAttempted, ToolCalled, ToolReturned, TurnRetried
from venus_edge.testing import ScriptedEngine, answer_turn, collect_events, tool_call_turn
from venus_edge.toolbox import default_tools
from venus_edge.tools.base import ToolResult
from venus_edge.tools.corpus import Hit
from venus_edge.tools.search import SearchTool
from venus_edge.tools.web_search import SearchAttempt
from venus_edge.trajectory import read_trajectories

TOMLLIB = "corpus://pydocs/library/tomllib.html"


call, answer = tool_call_turn, answer_turn


@pytest.fixture()
def tools(docs_corpus):
    return default_tools([docs_corpus])


def run(turns, tools, tmp_path=None, **config):
    engine = ScriptedEngine(list(turns))
    agent = Agent(engine, tools, config=AgentConfig(**config),
                  trajectory_path=tmp_path / "t.jsonl" if tmp_path else None)
    result, events = collect_events(agent.events("When was tomllib added to Python?"))
    return result, events, engine


def observations(result) -> list[str]:
    return [m["content"] for m in result.messages if m["role"] == "user"][1:]


def test_search_visit_answer_with_sources_and_journal(tools, tmp_path):
    result, events, engine = run([
        call("search", query=["tomllib added"]),
        call("visit", url=[TOMLLIB], goal="version tomllib was added"),
        answer(f"Python 3.11, see {TOMLLIB}"),
    ], tools, tmp_path)
    assert result.termination == "answered" and result.answer == f"Python 3.11, see {TOMLLIB}"
    assert result.sources == [TOMLLIB] and result.unvisited_citations == []
    search_obs, visit_obs = observations(result)
    results = json.loads(search_obs.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>"))
    assert results[0]["query"] == "tomllib added" and results[0]["web_page_info_list"][0]["url"] == TOMLLIB
    assert visit_obs.startswith(f"<tool_response>\nThe useful information in {TOMLLIB} for user goal")
    # Each prompt extends the previous one: the history is append-only.
    prompts = engine.prompts
    assert all(b.startswith(a.removesuffix(protocol.GENERATION_PROMPT)) for a, b in itertools.pairwise(prompts))
    [trajectory] = read_trajectories(tmp_path / "t.jsonl")
    assert trajectory.messages == result.messages and trajectory.termination == "answered"
    assert [t.tool_call["name"] for t in trajectory.turns[:2]] == ["search", "visit"]
    assert not any(isinstance(e, ToolAttempted) for e in events), "the corpus answers first time: no attempts"
    assert [t.tool_attempts for t in trajectory.turns] == [(), (), ()]


def test_the_summary_says_what_was_searched_and_read_with_titles(tools, tmp_path):
    """The CLI's summary is built from the result: every query with its result count, each page read with the
    title its search listed, the answer, and an unread citation flagged."""
    result, _, _ = run([
        call("search", query=["tomllib added", "pickle protocol"]),
        call("visit", url=[TOMLLIB], goal="version tomllib was added"),
        answer(f"Python 3.11 ({TOMLLIB}, https://example.com/x)"),
    ], tools, tmp_path)
    printed = io.StringIO()
    _print_result(result, printed)
    found = json.loads(observations(result)[0].removeprefix("<tool_response>\n").removesuffix("\n</tool_response>"))
    counts = [len(block["web_page_info_list"]) for block in found]
    title = next(hit["title"] for hit in found[0]["web_page_info_list"] if hit["url"] == TOMLLIB)
    assert printed.getvalue() == (
        f"Answer:\nPython 3.11 ({TOMLLIB}, https://example.com/x)\n\n"
        f'Searched:\n  "tomllib added" ({counts[0]} results)\n  "pickle protocol" ({counts[1]} results)\n\n'
        f"Sources (pages read):\n  {TOMLLIB}  ({title})\n"
        "Cited but never read: https://example.com/x\n\n"
        f"Trajectory: {tmp_path / 't.jsonl'}\n"
    )


def test_the_summary_lists_a_search_whose_results_the_context_limit_replaced(tools, tmp_path):
    """At the context limit the last tool result gives way to the limit's notice (the forced answer): the summary
    said "Searched: nothing" after searches that ran. It lists them by their calls' queries."""
    from dataclasses import replace

    result, _, _ = run([
        call("search", query=["tomllib added"]),
        call("search", query=["pickle protocol", "toml writer"]),
        answer("Python 3.11"),
    ], tools, tmp_path)
    messages = list(result.messages)
    messages[5] = {"role": "user", "content": protocol.limit_message("context")}  # as the forced answer leaves it
    printed = io.StringIO()
    _print_result(replace(result, messages=messages), printed)
    first = json.loads(observations(result)[0].removeprefix("<tool_response>\n").removesuffix("\n</tool_response>"))
    assert (f'Searched:\n  "tomllib added" ({len(first[0]["web_page_info_list"])} results)\n'
            '  "pickle protocol" (results dropped at the context limit)\n'
            '  "toml writer" (results dropped at the context limit)\n') in printed.getvalue(), printed.getvalue()


def test_the_summary_of_a_run_that_read_nothing_says_so(tools):
    result, _, _ = run([answer("no idea")], tools)
    printed = io.StringIO()
    _print_result(result, printed)
    assert printed.getvalue() == "Answer:\nno idea\n\nSearched: nothing\n\nSources: none (no page was read)\n"


def test_malformed_turn_is_retried_then_answered_with_the_format_notice(tools):
    bad = 'x\n</think>\n\n<tool_call>\nsearch for "a" please\n</tool_call>'
    result, events, _ = run([bad, bad, bad, answer("3.11")], tools, max_retries=3)
    retries = [e for e in events if isinstance(e, TurnRetried)]
    assert [e.reason for e in retries] == ["format", "format"] and "not valid JSON" in retries[0].detail
    assert observations(result) == [protocol.observation(protocol.FORMAT_ERROR_NOTICE)]
    assert result.termination == "answered" and result.turns == 2


def test_unknown_tool_is_a_format_error_naming_the_valid_tools(tools):
    result, events, _ = run([call("browse", url="x"), answer("a")], tools, max_retries=1)
    assert observations(result) == [protocol.observation(protocol.FORMAT_ERROR_NOTICE)]
    assert any("Unknown tool 'browse'" in json.dumps(e.to_dict()) for e in events)


def test_arguments_outside_the_schema_are_dropped_and_the_call_runs(tools, tmp_path):
    """As the reference does (``_filter_args``): the model sees the plain result, never an error text; the
    dropped names go into the event and the journal."""
    result, events, _ = run([call("search", query=["tomllib"], page=2, lang="en"), answer("a")], tools, tmp_path)
    [called] = [e for e in events if isinstance(e, ToolCalled)]
    assert called.arguments == {"query": ["tomllib"]} and called.dropped_arguments == ["page", "lang"]
    assert json.loads(observations(result)[0].removeprefix("<tool_response>\n").removesuffix("\n</tool_response>"))[0][
        "query"] == "tomllib"
    [trajectory] = read_trajectories(tmp_path / "t.jsonl")
    assert trajectory.turns[0].dropped_arguments == ("page", "lang")
    assert trajectory.turns[0].tool_call == {"name": "search", "arguments": {"query": ["tomllib"]}}


@pytest.mark.parametrize("query", ['["tomllib", "pickle"]', "['tomllib', 'pickle']", ' [ "tomllib" , "pickle" ] '])
def test_a_json_encoded_list_argument_is_decoded(tools, query):
    """``"query": "[\\"a\\", \\"b\\"]"`` searches a and b, not the literal text; Python's quoting too."""
    result, events, _ = run([call("search", query=query), answer("a")], tools)
    [called] = [e for e in events if isinstance(e, ToolCalled)]
    assert called.arguments == {"query": ["tomllib", "pickle"]} and called.argument_changes
    searched = json.loads(observations(result)[0].removeprefix("<tool_response>\n").removesuffix("\n</tool_response>"))
    assert [block["query"] for block in searched] == ["tomllib", "pickle"]


@pytest.mark.parametrize(
    "first, again",
    [({"query": "tomllib"}, {"query": ["tomllib"]}), ({"query": ["tomllib"]}, {"queries": "tomllib"}),
     ({"query": '["tomllib"]'}, {"query": ["tomllib"], "page": 3})],
)
def test_the_duplicate_guard_compares_calls_coerced_to_the_schema(tools, first, again):
    """"q" and ["q"] (and an alias, an encoded list, an extra argument) are the same call, as the tools see it."""
    _, events, _ = run([call("search", **first), call("search", **again), answer("a")], tools, max_retries=2)
    assert [e.reason for e in events if isinstance(e, TurnRetried)] == ["duplicate_call"]


def test_a_lenient_turn_enters_the_history_canonical_and_the_journal_keeps_what_was_generated(tools, tmp_path):
    lenient = "x\n</think>\n\n<tool_call>\n{'name': 'search', 'arguments': {'query': ['tomllib'],},}\n</tool_call>"
    result, _, _ = run([lenient, answer("3.11")], tools, tmp_path)
    canonical = ('<think>\nx\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": ["tomllib"]}}'
                 "\n</tool_call>")
    assert result.messages[2] == {"role": "assistant", "content": canonical}
    [trajectory] = read_trajectories(tmp_path / "t.jsonl")
    first = trajectory.turns[0]
    assert first.content == canonical and first.generated == "<think>\n" + lenient
    assert [e["code"] for e in first.format_errors] == ["lenient_json"]
    assert trajectory.turns[1].generated is None, "a well-formed turn is stored once"


def test_reasoning_that_mentions_tool_response_is_not_cut(tools):
    """The same characters in the reasoning are text: the turn runs, nothing is retried."""
    talk = ("Results come back inside <tool_response> tags.\n</think>\n\n<tool_call>\n"
            '{"name": "search", "arguments": {"query": ["tomllib"]}}\n</tool_call>\n<tool_response>\nmade up')
    result, events, _ = run([talk, answer("3.11")], tools)
    assert not [e for e in events if isinstance(e, TurnRetried)]
    assert result.messages[2]["content"].startswith("<think>\nResults come back inside <tool_response> tags.")
    assert result.messages[2]["content"].endswith("</tool_call>") and "made up" not in result.messages[2]["content"]


def test_duplicate_call_is_resampled_then_executed_on_the_last_attempt(tools):
    same = call("search", query=["tomllib"])
    result, events, _ = run([same, same, same, answer("a")], tools, max_retries=2)
    assert [e.reason for e in events if isinstance(e, TurnRetried)] == ["duplicate_call"]
    assert len(observations(result)) == 2 and result.termination == "answered"


def test_repetitive_output_is_resampled(tools):
    looping = ("I think " + "the answer is here. " * 12 + "\n</think>\n\n<answer>\nx\n</answer>"
               + " the answer is here." * 6)
    result, events, _ = run([looping, answer("3.11")], tools)
    assert [e.reason for e in events if isinstance(e, TurnRetried)] == ["repetition"]
    assert result.answer == "3.11"


def test_empty_output_every_time_ends_with_llm_error(tools):
    result, _, _ = run(["", " ", "\n"], tools, max_retries=3)
    assert result.termination == "llm_error" and result.answer is None


def test_turn_limit_replaces_last_observation_and_forces_an_answer(tools):
    result, events, engine = run([call("search", query=["a"]), call("search", query=["b"]), answer("forced")],
                                 tools, max_turns=2)
    assert result.termination == "answered_max_steps" and result.answer == "forced"
    assert observations(result)[-1] == protocol.observation(protocol.STEP_LIMIT_NOTICE)
    assert protocol.STEP_LIMIT_NOTICE in engine.prompts[-1]
    assert any(isinstance(e, LimitReached) and e.limit == "turns" for e in events)


def test_turn_limit_without_answer(tools):
    result, _, _ = run([call("search", query=["a"]), call("search", query=["b"])], tools, max_turns=1, max_retries=1)
    assert result.termination == "max_steps" and result.answer is None


def test_the_summary_tells_a_forced_answer_and_a_non_answer_from_an_answer(tools):
    """The CLI's first line uses the termination table's words (as the page does): a forced answer is not a plain
    "Answer:", a non-answer says which limit ended it."""
    forced, _, _ = run([call("search", query=["a"]), answer("forced")], tools, max_turns=1)
    none, _, _ = run([call("search", query=["a"]), call("search", query=["b"])], tools, max_turns=1, max_retries=1)
    printed = {}
    for name, result in (("forced", forced), ("none", none)):
        out = io.StringIO()
        _print_result(result, out)
        printed[name] = out.getvalue()
    assert printed["forced"].startswith("Answer (answer forced at the turn limit):\nforced\n")
    assert printed["none"].startswith("No answer: turn limit (termination 'max_steps').\n")


def test_context_budget_forces_the_final_answer(tools):
    result, _, _ = run([call("search", query=["tomllib"]), answer("short")], tools, max_prompt_tokens=2_300)
    assert result.termination == "answered_token_limit"
    assert observations(result)[-1] == protocol.observation(protocol.CONTEXT_LIMIT_NOTICE)


def test_question_longer_than_the_budget_is_a_clear_error_and_the_journal_keeps_it(tools, tmp_path):
    engine = ScriptedEngine([], n_ctx=3_000)
    agent = Agent(engine, tools, trajectory_path=tmp_path / "t.jsonl", config=AgentConfig(answer_reserve_tokens=100))
    with pytest.raises(ContextOverflowError, match=r"n_ctx is 3,000; .*raise n_ctx"):
        agent.run("why? " * 1000)
    [trajectory] = read_trajectories(tmp_path / "t.jsonl")
    assert trajectory.termination == "token_limit_no_answer" and trajectory.question.startswith("why?")


def test_wall_clock_limit(tools):
    """The time limit ends the session (reference: timeout, no forced answer) and the CLI says so."""
    result, events, engine = run([call("search", query=["a"])] * 3, tools, time_limit_s=1e-9)
    assert result.termination == "timeout" and result.answer is None and engine.prompts == []
    out = io.StringIO()
    for event in events:
        _Progress(out, quiet=False).show(event)
    assert "time limit reached" in out.getvalue() and "the session ends without an answer" in out.getvalue()
    assert "final answer" not in out.getvalue()


def test_turn_limit_line_says_the_final_answer_is_asked_for(tools):
    _, events, _ = run([call("search", query=["a"]), answer("forced")], tools, max_turns=1)
    out = io.StringIO()
    for event in events:
        _Progress(out, quiet=False).show(event)
    assert "turns limit reached: 1 turns used; the model is asked for its final answer" in out.getvalue()


class CrashingTool:
    name = "search"
    schema: ClassVar[dict[str, Any]] = {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "array", "items": {"type": "string"}}},
        "required": ["query"]}}}

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        raise RuntimeError("backend exploded")


def test_a_crashing_tool_becomes_an_observation_and_the_loop_goes_on():
    result, events, _ = run([call("search", query=["a"]), answer("fine")], [CrashingTool()])
    assert result.answer == "fine"
    assert "the search tool failed (RuntimeError)" in observations(result)[0]
    assert any(isinstance(e, ErrorRaised) and "backend exploded" in e.message for e in events)


def test_killed_run_keeps_its_journal_and_reads_back_incomplete(tools, tmp_path):
    turns = [call("search", query=["tomllib"]), call("visit", url=[TOMLLIB], goal="version"), KeyboardInterrupt()]
    with pytest.raises(KeyboardInterrupt):
        run(turns, tools, tmp_path)
    [trajectory] = read_trajectories(tmp_path / "t.jsonl")
    assert trajectory.termination == "incomplete" and len(trajectory.turns) == 2
    assert trajectory.sources == [TOMLLIB]
    assert [m["role"] for m in trajectory.messages] == ["system", "user", "assistant", "user", "assistant", "user"]


def test_citations_of_unvisited_urls_are_flagged(tools):
    result, _, _ = run([answer("See https://example.com/made-up and corpus://pydocs/x.html.")], tools)
    assert result.unvisited_citations == ["https://example.com/made-up", "corpus://pydocs/x.html"]


def test_strict_mode_sends_grammars_that_forbid_answers_before_min_tool_calls(tools):
    _, _, engine = run([call("search", query=["a"]), answer("x")], tools, strict=True, min_tool_calls=1)
    first, second = engine.grammars
    assert "root ::= reasoning \"</think>\\n\\n\" call" in first
    assert "( call | answer )" in second


def _grammar_tools(grammar: str) -> list[str]:
    """The tool names a turn grammar lets the model call."""
    call_rule = next(line for line in grammar.splitlines() if line.startswith("call ::="))
    return [name for name in ("search", "visit") if f'\\"name\\": \\"{name}\\"' in call_rule]


def test_required_calls_offer_only_the_due_tool_and_no_answer_until_made(tools):
    """``required_calls=("search", "visit")``: turn 1 may only search, turn 2 only visit, turn 3 anything."""
    turns = [call("search", query=["tomllib"]), call("visit", url=[TOMLLIB], goal="version"), answer("3.11")]
    result, _, engine = run(turns, tools, strict=True, required_calls=("search", "visit"))
    first, second, third = engine.grammars
    assert _grammar_tools(first) == ["search"] and "root ::= reasoning \"</think>\\n\\n\" call" in first
    assert _grammar_tools(second) == ["visit"] and "( call | answer )" not in second
    assert _grammar_tools(third) == ["search", "visit"] and "( call | answer )" in third
    assert result.sources == [TOMLLIB]


def test_a_required_visit_waits_for_a_search_that_found_a_url(tools):
    """A search that found nothing shows no URL to visit: the grammar offers search again (still no answer), and the
    visit is due once a search listed pages."""
    turns = [call("search", query=["qqqzzzxxy"]), call("search", query=["tomllib"]),
             call("visit", url=[TOMLLIB], goal="version"), answer("3.11")]
    result, _, engine = run(turns, tools, strict=True, required_calls=("search", "visit"))
    assert '"web_page_info_list": []' in observations(result)[0], "the first query must find nothing"
    assert [_grammar_tools(g) for g in engine.grammars] == [["search"], ["search"], ["visit"], ["search", "visit"]]
    assert ["( call | answer )" in g for g in engine.grammars] == [False, False, False, True]


def test_strict_url_arguments_name_only_urls_the_tool_responses_showed(tools):
    """Before any tool response the URL is free text; after a search, visit's URL is one of its results, and a URL
    that failed to read is offered no more."""
    missing = "corpus://pydocs/library/missing.html"
    turns = [call("visit", url=[missing], goal="x"), call("search", query=["tomllib"]),
             call("visit", url=[TOMLLIB], goal="version"), answer("3.11")]
    result, _, engine = run(turns, tools, strict=True)
    before, after_failure, after_search, _ = engine.grammars
    url_rule = next(line for line in before.splitlines() if line.startswith("args-visit ::="))
    assert "string" in url_rule.split('\\"url\\": ')[1].split('", "')[0], url_rule
    assert missing not in after_failure, "a URL that failed to read is never offered"
    visit_rule = next(line for line in after_search.splitlines() if line.startswith("args-visit ::="))
    assert f'\\"{TOMLLIB}\\"' in visit_rule and missing not in visit_rule, visit_rule
    search_results = json.loads(observations(result)[1].removeprefix("<tool_response>\n").removesuffix(
        "\n</tool_response>"))
    for hit in search_results[0]["web_page_info_list"]:
        assert f'\\"{hit["url"]}\\"' in visit_rule, hit["url"]
    llama_cpp = pytest.importorskip("llama_cpp")
    llama_cpp.LlamaGrammar.from_string(after_search, verbose=False)


def test_a_url_the_model_searched_for_is_not_offered_as_a_page(tools):
    """A query that is a URL comes back in the search results' ``query``: it is the model's own text, not a page the
    search found, so visit may not name it (seen with SmolLM2: it visited the URL it had searched for)."""
    made_up = "https://www.example.com/api/search?q=tomllib"
    turns = [call("search", query=[made_up]), call("visit", url=[TOMLLIB], goal="version"), answer("3.11")]
    result, _, engine = run(turns, tools, strict=True, required_calls=("search", "visit"))
    assert made_up in observations(result)[0]
    visit_rule = next(line for line in engine.grammars[1].splitlines() if line.startswith("args-visit ::="))
    assert made_up not in visit_rule and TOMLLIB in visit_rule, visit_rule


def test_required_calls_must_name_the_agents_tools(tools):
    with pytest.raises(ValueError, match="'browse', not a tool of this agent; its tools are search, visit"):
        run([answer("x")], tools, strict=True, required_calls=("search", "browse"))


def test_required_calls_survive_the_journal(tools, tmp_path):
    """The config round-trips through the journal's start record (a resumed session keeps its sequence)."""
    run([call("search", query=["a"]), call("visit", url=[TOMLLIB], goal="g"), answer("x")], tools, tmp_path,
        strict=True, required_calls=("search", "visit"))
    [trajectory] = read_trajectories(tmp_path / "t.jsonl")
    assert AgentConfig.from_dict(trajectory.header["config"]).required_calls == ("search", "visit")


def test_tool_results_events_report_failures(tools):
    _, events, _ = run([call("visit", url=["corpus://pydocs/nope.html"], goal="x"), answer("x")], tools)
    [returned] = [e for e in events if isinstance(e, ToolReturned)]
    assert returned.visited_urls == [] and returned.failures[0]["kind"] == "not_found"


class ThrottledWebBackend:
    """A search backend that logs its tries as ``DdgsSearchBackend`` does: in round 0 DuckDuckGo and Brave
    answer HTTP 429, then after a 2.5 s back-off DuckDuckGo answers (the real backend is tested in
    tests/tools/test_web_search.py)."""

    def __init__(self) -> None:
        self.attempts: list[SearchAttempt] = []

    def search(self, query: str, k: int) -> list[Hit]:
        self.attempts += [
            SearchAttempt(query, "duckduckgo", "rate_limited", "duckduckgo answered HTTP 429 (rate limited)"),
            SearchAttempt(query, "brave", "rate_limited", "brave answered HTTP 429 (rate limited)"),
            SearchAttempt(query, "duckduckgo", "ok", "1 result(s)", waited_s=2.5),
        ]
        return [Hit("tomllib", TOMLLIB, "New in version 3.11.")]


def test_backend_attempts_are_events_before_the_result_and_in_the_journal(tmp_path):
    """Each backend attempt of a search is a ToolAttempted event between ToolCalled and ToolReturned, in order,
    is written into the turn's journal record, and the CLI shows the throttled ones and the wait."""
    result, events, _ = run([call("search", query=["tomllib added"]), answer("3.11")],
                            [SearchTool(ThrottledWebBackend())], tmp_path)
    assert result.answer == "3.11"
    kinds = [type(e).__name__ for e in events if isinstance(e, (ToolCalled, ToolAttempted, ToolReturned))]
    assert kinds == ["ToolCalled", "ToolAttempted", "ToolAttempted", "ToolAttempted", "ToolReturned"], kinds
    attempted = [e for e in events if isinstance(e, ToolAttempted)]
    assert [(e.turn, e.name, e.backend, e.target, e.outcome, e.waited_s) for e in attempted] == [
        (0, "search", "duckduckgo", "tomllib added", "rate_limited", 0.0),
        (0, "search", "brave", "tomllib added", "rate_limited", 0.0),
        (0, "search", "duckduckgo", "tomllib added", "ok", 2.5),
    ]
    assert attempted[0].to_dict() == {
        "type": "tool_attempt", "turn": 0, "name": "search", "backend": "duckduckgo", "target": "tomllib added",
        "outcome": "rate_limited", "detail": "duckduckgo answered HTTP 429 (rate limited)", "waited_s": 0.0,
    }

    [trajectory] = read_trajectories(tmp_path / "t.jsonl")
    recorded = [{k: v for k, v in e.to_dict().items() if k not in ("type", "turn", "name")} for e in attempted]
    assert [list(t.tool_attempts) for t in trajectory.turns] == [recorded, []]

    out = io.StringIO()
    progress = _Progress(out, quiet=False)
    for event in events:
        progress.show(event)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("  search: ")]
    assert lines == [
        "  search: duckduckgo rate_limited (duckduckgo answered HTTP 429 (rate limited))",
        "  search: brave rate_limited (brave answered HTTP 429 (rate limited))",
        "  search: duckduckgo ok (1 result(s)), waited 2.5 s",
    ], out.getvalue()


def test_journal_turns_written_before_new_fields_read_back_with_empty_values(tmp_path):
    """A turn record from before ``kind``, ``tool_attempts``, ``generated``, ``logprobs`` and the argument fields
    existed reads back as a ``Turn`` with their empty values, its kind taken from its tool call."""
    path = tmp_path / "old.jsonl"
    path.write_text(
        '{"record": "start", "schema_version": 1, "session_id": "s1", "question": "q", "system_prompt": "sys"}\n'
        '{"record": "turn", "session_id": "s1", "turn": 0, "content": "c", "token_ids": [1, 2], "observation": "o",'
        ' "tool_call": {"name": "search", "arguments": {"query": ["x"]}}, "tool_failures": []}\n', encoding="utf-8")
    [trajectory] = read_trajectories(path)
    [turn] = trajectory.turns
    assert (turn.index, turn.kind, turn.token_ids, turn.observation) == (0, "tool_call", (1, 2), "o")
    assert (turn.tool_attempts, turn.dropped_arguments, turn.generated, turn.logprobs) == ((), (), None, None)
    assert trajectory.termination == "incomplete"
    assert trajectory.messages[-1] == {"role": "user", "content": "o"}


def test_events_carry_the_records_and_keep_their_wire_shape(tools, tmp_path):
    """``TurnCompleted`` carries the ``Turn``, ``SessionFinished`` the ``Result``; their ``to_dict()`` (the server's
    SSE, the page, MCP progress) keeps the flat fields clients read, and the journal's totals are the record's."""
    from venus_edge.events import SessionFinished, TurnCompleted
    from venus_edge.result import SessionTotals

    result, events, _ = run([call("search", query=["tomllib added"]), answer("3.11")], tools, tmp_path)
    completed = [e for e in events if isinstance(e, TurnCompleted)]
    [trajectory] = read_trajectories(tmp_path / "t.jsonl")
    assert [e.record for e in completed] == list(trajectory.turns)
    assert [e.turn for e in completed] == [0, 1]
    assert completed[0].to_dict() == {
        "type": "turn_completed", "turn": 0, "kind": "tool_call", "content": trajectory.turns[0].content,
        "format_errors": [], "stats": trajectory.turns[0].stats}
    finished = events[-1]
    assert isinstance(finished, SessionFinished) and finished.result is result
    assert isinstance(result.totals, SessionTotals) and result.totals.tool_calls == 1
    assert finished.to_dict() == {
        "type": "session_finished", "termination": "answered", "answer": "3.11", "sources": result.sources,
        "turns": 2, "elapsed_s": result.elapsed_s, "totals": result.totals.to_dict(), "unvisited_citations": [],
        "session_id": result.session_id}
    assert list(result.totals.to_dict()) == [
        "prompt_tokens_evaluated", "prompt_tokens_reused", "tokens_decoded", "prefill_s", "decode_s", "tool_s",
        "retries", "format_errors", "tool_calls", "generated_turns", "well_formed_turns", "compactions",
        "compaction_tokens_reevaluated"]  # the 13 keys; resumed_at_turn and final_turn_mean_logprob only when set
    end = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()][-1]
    assert end["record"] == "end" and end["totals"] == result.totals.to_dict()


def test_every_termination_has_its_words_and_only_a_chosen_answer_reads_as_one() -> None:
    """Each termination reason the loop records (the upper-case constants of ``venus_edge.result``) has its label
    and outcome in ``TERMINATIONS``, which the CLI and the page read; only ``answered`` is an ``answer``, the
    answers a limit forced are ``forced_answer``, and no label of a non-answer starts with "Answered"."""
    reasons = {value for name, value in vars(result_module).items()
               if name.isupper() and isinstance(value, str) and name != "NO_SOURCES"}
    assert reasons == set(result_module.TERMINATIONS), reasons ^ set(result_module.TERMINATIONS)
    outcomes = {name: t.outcome for name, t in result_module.TERMINATIONS.items()}
    assert [name for name, outcome in outcomes.items() if outcome == "answer"] == ["answered"]
    assert {name for name, outcome in outcomes.items() if outcome == "forced_answer"} == {
        "answered_max_steps", "answered_token_limit"}
    assert not [t.label for t in result_module.TERMINATIONS.values()
                if t.outcome != "answer" and t.label.startswith("Answered")]
    unknown = result_module.termination_of("stopped_by_a_newer_version")
    assert (unknown.label, unknown.outcome) == ("Stopped by a newer version", "no_answer")


def test_a_tool_call_turn_journals_the_seconds_its_tool_took(tools, tmp_path):
    """``Turn.tool_s`` is the ``ToolReturned`` event's ``elapsed_s`` (the page shows it live and reopened); a turn
    without a call has none."""
    _, events, _ = run([call("search", query=["tomllib"]), answer("done")], tools, tmp_path)
    (returned,) = [e for e in events if isinstance(e, ToolReturned)]
    (trajectory,) = read_trajectories(tmp_path / "t.jsonl")
    assert [t.tool_s for t in trajectory.turns] == [returned.elapsed_s, None]
