"""Context policies, the answer reserve and the settings check, driven by a scripted engine (one token per
character, ``max_tokens`` and ``n_ctx`` honoured as a real engine honours them) and the real corpus tools.
A real model runs the same policies in tests/test_context_real.py."""

from __future__ import annotations

import re

import pytest

from venus_edge import protocol
from venus_edge.agent import Agent, AgentConfig, default_answer_reserve
from venus_edge.engines.base import SamplingParams
from venus_edge.errors import ContextSettingsError
from venus_edge.events import ContextCompacted, LimitReached, TurnStarted
from venus_edge.policies import (
    Compaction,
    CompactionContext,
    ContextPolicy,
    KeepLastK,
    Summarize,
    fit_result,
    make_policy,
)
from venus_edge.testing import ScriptedEngine, answer_turn, collect_events, tool_call_turn
from venus_edge.toolbox import default_tools
from venus_edge.tools.base import cut_note, split_cut_note
from venus_edge.tools.corpus import Hit
from venus_edge.tools.search import format_search_observation, parse_search_observation
from venus_edge.trajectory import read_journal, rebuild_messages

QUERIES = ["tomllib", "pickle protocol", "json module", "asyncio", "pathlib", "dataclasses", "typing", "zipfile"]
QUESTION = "Which modules did you read about?"


@pytest.fixture()
def tools(docs_corpus):
    return default_tools([docs_corpus])


def researcher(prompt: str) -> str:
    """A model that searches each of QUERIES once (counting the searches it sees made, stubbed or not), then
    answers; asked for notes (the summarize notice), it writes them, and asked for the answer, it answers."""
    last = prompt.rsplit(protocol.IM_START, 2)[-2]
    if protocol.CONTEXT_LIMIT_NOTICE in last:
        return answer_turn("what I have")
    if protocol.SUMMARY_NOTICE in last:
        return answer_turn("notes: searched " + ", ".join(re.findall(r'"query": \["([^"]+)"\]', prompt)))
    done = set(re.findall(r'"query": \["([^"]+)"\]', prompt.split(protocol.SUMMARY_NOTICE)[-1]))
    done |= set(re.findall(r"searched ([^\n<]+)", prompt)[-1].split(", ")) if "notes: searched" in prompt else set()
    todo = [q for q in QUERIES if q not in done]
    return tool_call_turn("search", query=[todo[0]]) if todo else answer_turn("all of them")


def run(tools, tmp_path, n_ctx, **config):
    engine = ScriptedEngine(researcher, n_ctx=n_ctx)
    agent = Agent(engine, tools, config=AgentConfig(answer_reserve_tokens=400, **config),
                  trajectory_path=tmp_path / "t.jsonl")
    result, events = collect_events(agent.events(QUESTION))
    return result, events, engine


def searches(result) -> list[str]:
    return [json_query for m in result.messages if m["role"] == "assistant"
            for json_query in re.findall(r'"query": \["([^"]+)"\]', m["content"])]


N_CTX = 9_000  # the system prompt and ~3 search results; the eight searches need about 3x that


def test_force_answer_stops_where_keep_last_k_and_summarize_go_on(tools, tmp_path):
    forced, forced_events, forced_engine = run(tools, tmp_path / "f", N_CTX)
    kept, _kept_events, kept_engine = run(tools, tmp_path / "k", N_CTX, context_policy="keep-last-k", keep_last=1)
    summed, _summed_events, summed_engine = run(tools, tmp_path / "s", N_CTX, context_policy="summarize")

    assert forced.termination == "answered_token_limit" and len(searches(forced)) < len(QUERIES)
    assert not any(isinstance(e, ContextCompacted) for e in forced_events)
    assert kept.termination == "answered" and kept.answer == "all of them" and kept.turns == len(QUERIES) + 1
    assert summed.termination == "answered" and summed.answer == "all of them"
    for engine in (forced_engine, kept_engine, summed_engine):  # no prompt ever overflowed n_ctx
        assert max(len(p) for p in engine.prompts) < N_CTX
    assert kept.totals.compactions >= 1 and summed.totals.compactions >= 1


def test_keep_last_k_stubs_all_but_the_last_k_results_naming_each_call(tools, tmp_path):
    result, events, _ = run(tools, tmp_path, N_CTX, context_policy="keep-last-k", keep_last=2)
    observations = [m["content"] for m in result.messages if m["role"] == "user"][1:]
    stubs = [o for o in observations if protocol.is_omitted_result(o)]
    assert stubs and all(not protocol.is_omitted_result(o) for o in observations[-2:])
    assert all("search" in s and '"query"' in s for s in stubs)
    assert observations.index(stubs[-1]) < len(observations) - 2  # stubs are the oldest ones
    compactions = [e for e in events if isinstance(e, ContextCompacted)]
    assert all(e.policy == "keep-last-k" and e.tokens_after < e.tokens_before for e in compactions)
    # The edit is at the first stubbed result: everything after it is evaluated again, nothing before it.
    first = compactions[0]
    assert 0 < first.tokens_reevaluated < first.tokens_after


def test_a_stubbed_call_may_be_made_again(tools, tmp_path):
    """The duplicate guard forgets a call whose result was stubbed: the model can fetch it again."""
    turns = [tool_call_turn("search", query=[q]) for q in QUERIES[:4]] + [
        tool_call_turn("search", query=[QUERIES[0]]), answer_turn("done")]
    engine = ScriptedEngine(turns, n_ctx=N_CTX)
    agent = Agent(engine, tools, config=AgentConfig(answer_reserve_tokens=400, context_policy="keep-last-k",
                                                    keep_last=1))
    result = agent.run(QUESTION)
    assert result.termination == "answered" and result.totals.retries == 0
    assert searches(result)[-1] == QUERIES[0] and not protocol.is_omitted_result(result.messages[-2]["content"])


def test_summarize_restarts_from_the_question_and_notes_with_sources_kept(tools, tmp_path):
    result, events, engine = run(tools, tmp_path, N_CTX, context_policy="summarize")
    assert result.messages[1]["content"].startswith(QUESTION + "\n\nNotes from your research so far")
    assert "notes: searched tomllib" in result.messages[1]["content"]
    assert "Pages already read" not in result.messages[1]["content"]  # search reads no page
    [compaction] = [e for e in events if isinstance(e, ContextCompacted)][:1]
    notes_started = [e for e in events if isinstance(e, TurnStarted) and e.purpose == "notes"]
    assert notes_started and events.index(notes_started[0]) < events.index(compaction)  # streamed before it
    assert compaction.policy == "summarize" and compaction.tokens_after < compaction.tokens_before
    # The notes were asked for in the tool response of the last result, as a turn of its own (tagged "notes").
    asked = [p for p in engine.prompts if protocol.SUMMARY_NOTICE in p]
    assert asked and protocol.TOOL_RESPONSE_OPEN in asked[0].rsplit(protocol.SUMMARY_NOTICE, 1)[0][-3000:]


def test_summarize_gives_up_after_max_summaries_and_forces_the_answer(tools, tmp_path):
    result, events, _ = run(tools, tmp_path, 7_000, context_policy="summarize", max_summaries=1)
    assert sum(isinstance(e, ContextCompacted) for e in events) == 1
    assert result.termination == "answered_token_limit"
    assert result.messages[-2]["content"] == protocol.observation(protocol.CONTEXT_LIMIT_NOTICE)


def test_the_journal_holds_each_compaction_and_rebuilds_the_conversation(tools, tmp_path):
    result, events, _ = run(tools, tmp_path, N_CTX, context_policy="keep-last-k", keep_last=1)
    [trajectory] = read_journal(tmp_path / "t.jsonl").trajectories
    compacted = [e for e in events if isinstance(e, ContextCompacted)]
    assert len(trajectory.compactions) == len(compacted)
    record = trajectory.compactions[0]
    assert record["tokens_reevaluated"] == compacted[0].tokens_reevaluated and record["policy"] == "keep-last-k"
    # Rebuilt from the start, turn and compaction records alone (as for a killed run): the conversation the model saw.
    assert rebuild_messages(trajectory.header, trajectory.turns, trajectory.compactions) == result.messages


def test_a_turn_that_reaches_the_budget_is_cut_there_and_the_answer_still_fits(tools):
    """A regular turn may not grow past the budget: the final answer always has its reserve."""
    rambling = "Let me think. " * 2_000  # 28,000 characters: more than the whole context
    engine = ScriptedEngine([tool_call_turn("search", query=["tomllib"]), rambling, answer_turn("3.11")],
                            n_ctx=8_000)
    agent = Agent(engine, tools, config=AgentConfig(answer_reserve_tokens=500))
    result, events = collect_events(agent.events(QUESTION))
    assert result.termination == "answered_token_limit" and result.answer == "3.11"
    assert any(isinstance(e, LimitReached) and "before it ended" in e.detail for e in events)
    assert max(len(p) for p in engine.prompts) < 8_000
    assert engine.max_tokens[1] == 8_000 - agent.config.answer_reserve_tokens - len(engine.prompts[1])
    assert result.totals.retries == 0  # a cut turn is not retried: the policy acts


def test_the_reserve_grows_to_the_longest_turn(tools):
    """After a long turn the reserve grows to that turn plus the limit notice, so that a final turn as long still
    fits: the next regular turn may only use the budget left below it."""
    long_turn = "Let me think step by step. " * 100 + tool_call_turn("search", query=["tomllib"])
    engine = ScriptedEngine([long_turn, answer_turn("ok")], n_ctx=12_000)
    Agent(engine, tools, config=AgentConfig(answer_reserve_tokens=10)).run(QUESTION)
    notice = len(protocol.render_messages([{"role": "user", "content": protocol.observation(
        protocol.CONTEXT_LIMIT_NOTICE)}]))
    first, second = engine.max_tokens
    assert first == 12_000 - notice - len(engine.prompts[0])  # the notice alone is more than the floor of 10
    assert second == 12_000 - (len(long_turn) + notice) - len(engine.prompts[1])


@pytest.mark.parametrize("n_ctx, reserve, message", [
    (4_000, 4_000, r"answer_reserve_tokens \(4,000\) must be smaller than n_ctx \(4,000\).*Lower it"),
    (4_000, 9_999, r"answer_reserve_tokens \(9,999\) must be smaller than n_ctx \(4,000\)"),
    (4_000, 3_000, r"leaves -?\d[\d,]* tokens for the question and the research, fewer than 256.*Raise n_ctx to at "
                   r"least [\d,]+ or lower answer_reserve_tokens to at most [\d,]+"),
])
def test_settings_that_cannot_work_together_are_refused_at_construction(tools, n_ctx, reserve, message):
    with pytest.raises(ContextSettingsError, match=message):
        Agent(ScriptedEngine([], n_ctx=n_ctx), tools, config=AgentConfig(answer_reserve_tokens=reserve))


def test_the_fix_the_refusal_names_works(tools):
    engine = ScriptedEngine([], n_ctx=4_000)
    with pytest.raises(ContextSettingsError) as refused:
        Agent(engine, tools, config=AgentConfig(answer_reserve_tokens=3_000))
    at_most = int(re.search(r"at most ([\d,]+)", str(refused.value)).group(1).replace(",", ""))
    at_least = int(re.search(r"at least ([\d,]+)", str(refused.value)).group(1).replace(",", ""))
    Agent(engine, tools, config=AgentConfig(answer_reserve_tokens=at_most))
    Agent(ScriptedEngine([], n_ctx=at_least), tools, config=AgentConfig(answer_reserve_tokens=3_000))


def test_policy_settings_are_checked():
    with pytest.raises(ValueError, match="unknown context policy 'keep-last'; choose one of force-answer, "
                                         "keep-last-k, summarize"):
        AgentConfig(context_policy="keep-last")
    with pytest.raises(ValueError, match="keep_last must be >= 0"):
        AgentConfig(context_policy="keep-last-k", keep_last=-1)
    with pytest.raises(ValueError, match="max_summaries must be >= 1"):
        make_policy("summarize", max_summaries=0)
    with pytest.raises(ValueError, match="answer_reserve_tokens must be >= 0"):
        AgentConfig(answer_reserve_tokens=-5)


def _context(messages, calls, budget=10_000, notes="n"):
    return CompactionContext(messages, calls, "q", [], 20_000, budget, lambda ms: sum(len(m["content"]) for m in ms),
                             notes)


def test_keep_last_k_forces_the_answer_when_stubbing_frees_too_little():
    big = protocol.observation("x" * 9_500)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"}, {"role": "user", "content": protocol.observation("y" * 500)},
                {"role": "assistant", "content": "b"}, {"role": "user", "content": big}]
    calls = {2: {"name": "search", "arguments": {"query": ["y"]}}, 4: {"name": "visit", "arguments": {"url": ["u"]}}}
    assert KeepLastK(keep_last=1).compact(_context(messages, calls)) is None  # the kept result alone is too big
    compaction = KeepLastK(keep_last=1).compact(_context(messages, calls, budget=20_000))
    assert compaction is not None and compaction.forget_calls == (2,)
    assert KeepLastK(keep_last=2).compact(_context(messages, calls)) is None  # nothing to stub


def test_summarize_without_notes_forces_the_answer():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert Summarize().compact(_context(messages, {}, notes=None)) is None
    assert Summarize().compact(_context(messages, {}, notes="   ")) is None
    policy = Summarize(max_summaries=1)
    assert policy.notes_request(_context(messages, {})) == protocol.SUMMARY_NOTICE
    assert policy.compact(_context(messages, {})).restart and policy.compact(_context(messages, {})) is None
    assert policy.notes_request(_context(messages, {})) is None  # no notes asked for once the restarts are spent


def test_omitted_result_names_the_call_and_is_recognised():
    stub = protocol.omitted_result({"name": "visit", "arguments": {"url": ["https://a.example/x"], "goal": "g",
                                                                    "extra": 1}})
    assert stub == ('[Result omitted to free context: visit {"url": ["https://a.example/x"], "goal": "g"}. '
                    "Call the tool again if you need it.]")
    assert protocol.is_omitted_result(protocol.observation(stub))
    assert not protocol.is_omitted_result(protocol.observation("[Result omitted to free context"))
    assert not protocol.is_omitted_result(stub)  # not wrapped as an observation
    for text in (stub, "", "two\nlines\n"):
        assert protocol.observation_text(protocol.observation(text)) == text
    with pytest.raises(ValueError, match="not a <tool_response> message"):
        protocol.observation_text(stub)


def test_a_turn_keeps_its_configured_max_tokens_when_the_budget_allows(tools):
    engine = ScriptedEngine([answer_turn("x")], n_ctx=100_000)
    Agent(engine, tools, config=AgentConfig(sampling=SamplingParams(max_tokens=77))).run(QUESTION)
    assert engine.max_tokens == [77]


def test_the_answer_is_forced_after_a_restart_with_the_question_kept(tools):
    """A turn cut right after a summarize restart: the notes request and then the limit notice come as tool
    responses of their own after the restarted question, which stays in the conversation."""
    rambling = "Let me think. " * 2_000

    def model(prompt):
        last = prompt.rsplit(protocol.IM_START, 2)[-2]
        if protocol.CONTEXT_LIMIT_NOTICE in last:
            return answer_turn("forced")
        if protocol.SUMMARY_NOTICE in last:
            return answer_turn("notes: searched tomllib")
        return rambling if "notes: searched" in prompt else tool_call_turn("search", query=["tomllib " * 3])

    engine = ScriptedEngine(model, n_ctx=5_000)
    agent = Agent(engine, tools, config=AgentConfig(answer_reserve_tokens=400, context_policy="summarize",
                                                    max_summaries=2))
    result = agent.run(QUESTION)
    assert result.answer == "forced" and result.termination == "answered_token_limit"
    assert result.messages[1]["content"].startswith(QUESTION) and "notes: searched" in result.messages[1]["content"]
    assert result.messages[-2] == {"role": "user", "content": protocol.observation(protocol.CONTEXT_LIMIT_NOTICE)}
    second_request = [p for p in engine.prompts if p.count(protocol.SUMMARY_NOTICE) and "notes: searched" in p]
    assert not second_request or QUESTION in second_request[0]


class FreesNothing(ContextPolicy):
    """A policy of one's own that returns the conversation unchanged."""

    name = "frees-nothing"

    def compact(self, context):
        return Compaction([dict(m) for m in context.messages], "nothing")


def test_a_policy_that_frees_nothing_cannot_loop(tools):
    rambling = "Let me think. " * 2_000
    engine = ScriptedEngine(lambda prompt: answer_turn("forced") if protocol.CONTEXT_LIMIT_NOTICE in prompt
                            else rambling, n_ctx=5_000)
    result = Agent(engine, tools, config=AgentConfig(answer_reserve_tokens=400, max_turns=5),
                   context_policy=FreesNothing()).run(QUESTION)
    assert result.answer == "forced" and len(engine.prompts) == 2


def test_max_prompt_tokens_too_small_names_its_own_fix(tools):
    with pytest.raises(ContextSettingsError, match=r"max_prompt_tokens \(2,000\) leaves .* Raise max_prompt_tokens "
                                                   r"to at least [\d,]+\.$"):
        Agent(ScriptedEngine([], n_ctx=100_000), tools, config=AgentConfig(max_prompt_tokens=2_000))


# ---------------------------------------------------------------------------------------------- a small window
def _hit(rank: int) -> Hit:
    return Hit(f"Result {rank}", f"https://example.org/{rank}", f"snippet {rank} " + "words " * 40, "2024-05-01")


@pytest.mark.parametrize("style", ["inference", "rl"])
def test_a_search_result_is_cut_by_its_lowest_ranked_hits_and_stays_a_search_result(style):
    """Two queries of 10 and 4 hits: hits go from the end of the fullest query first; what is left parses as a
    search result of the same style (the JSON, then the note), and the note says how many are shown."""
    blocks = [{"query": "a", "web_page_info_list": [_hit(r).to_dict(style) for r in range(10)]},
              {"query": "b", "web_page_info_list": [_hit(r).to_dict(style) for r in range(10, 14)]}]
    text = format_search_observation(blocks)
    cut = fit_result(text, lambda candidate: len(candidate) <= len(text) // 2)
    assert len(cut) <= len(text) // 2
    shown = parse_search_observation(cut)
    assert shown is not None and [b["query"] for b in shown] == ["a", "b"]
    urls = [[hit["url"] for hit in b["web_page_info_list"]] for b in shown]
    assert urls[0] == [f"https://example.org/{r}" for r in range(len(urls[0]))]  # the top of each query kept
    assert urls[1] == [f"https://example.org/{r}" for r in range(10, 10 + len(urls[1]))]
    assert len(urls[0]) >= len(urls[1]) - 1  # the fullest query lost hits first
    kept = sum(map(len, urls))
    body, note = split_cut_note(cut)
    assert note == cut_note(f"{kept} of 14 results shown; search again, more narrowly, for others")
    assert body == format_search_observation(shown)
    assert ('"date": "2024-05-01"' in body) is (style == "rl")


def test_a_text_result_keeps_its_longest_beginning_that_fits_cut_at_a_line():
    page = "\n".join(f"Line {n}: " + " ".join(["text"] * 12) for n in range(60))
    cut = fit_result(page, lambda candidate: len(candidate) <= 1_000)
    body, note = split_cut_note(cut)
    assert len(cut) <= 1_000 and page.startswith(body) and page[len(body)] == "\n"  # ends at a line break
    assert len(body) > 1_000 * 3 // 4 - 120  # the most that fits, less at most one line
    assert note == cut_note(f"the first {len(body):,} of {len(page):,} characters shown")
    assert fit_result(page, lambda candidate: True) == page  # a result that fits is not touched
    nothing = fit_result(page, lambda candidate: False)
    assert split_cut_note(nothing) == ("", cut_note(f"the first 0 of {len(page):,} characters shown"))


def test_each_policy_says_how_large_a_result_it_can_keep():
    assert make_policy("force-answer").result_allowance(1_000) is None  # the reference: results are never cut
    assert make_policy("keep-last-k", keep_last=3).result_allowance(1_000) == 900 // 4
    assert make_policy("keep-last-k", keep_last=0).result_allowance(1_000) is None  # keeps none anyway
    assert make_policy("summarize").result_allowance(1_000) == 750 // 2


def test_the_answer_reserve_scales_with_the_window():
    assert [default_answer_reserve(n) for n in (1_024, 2_048, 4_096, 32_768)] == [256, 512, 1_024, 1_024]
    assert AgentConfig().answer_reserve(2_048) == 512
    assert AgentConfig(answer_reserve_tokens=700).answer_reserve(2_048) == 700


def test_in_a_small_window_keep_last_k_cuts_a_result_it_could_never_keep_and_researches_on(tools, tmp_path):
    """A window (the scripted engine counts bytes) where the second search result of the docs passes the budget:
    force-answer stops there; keep-last-k and summarize cut each result to what they could keep when it arrives (the
    observation says so) and search on to their answer without overflowing."""
    n_ctx = 8_000
    outcomes = {}
    for policy in ("force-answer", "keep-last-k", "summarize"):
        engine = ScriptedEngine(researcher, n_ctx=n_ctx)
        agent = Agent(engine, tools, config=AgentConfig(context_policy=policy, max_turns=12))
        result, _ = collect_events(agent.events(QUESTION))
        assert max(len(p) for p in engine.prompts) < n_ctx, policy
        outcomes[policy] = result
    forced = outcomes["force-answer"]
    assert forced.termination == "answered_token_limit" and forced.totals.tool_calls < len(QUERIES)
    for policy in ("keep-last-k", "summarize"):
        result = outcomes[policy]
        assert result.termination == "answered" and result.answer == "all of them", (policy, result.termination)
        assert result.totals.tool_calls == len(QUERIES), (policy, result.totals)
        cut = [m["content"] for m in result.messages if m["role"] == "user" and "[Cut to fit the context: " in
               m["content"]]
        assert cut or policy == "summarize", policy  # a summarize restart may have dropped the cut ones
