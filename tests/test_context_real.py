"""Each context policy on a real model past its budget: SmolLM2 under the strict grammar, n_ctx 2048, search over the
real Python docs corpus. No run may overflow n_ctx or cut a turn silently; keep-last-k and summarize go on researching
where force-answer stops.

What the model writes differs between CPUs, seeds and thread counts, so the conditions make every asserted
outcome certain for any text it samples: each search result carries enough real documentation text to pass the
budget on its own (so every tool call ends at the budget), the grammar allows tool calls only until the fifth
(``min_tool_calls``) and bounds each turn's length (so the stubbed or restarted conversation always fits again).
"""

from __future__ import annotations

from typing import Any

import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.engines.base import SamplingParams
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.events import ContextCompacted, LimitReached, TurnStarted
from venus_edge.grammar import GrammarLimits
from venus_edge.testing import collect_events
from venus_edge.toolbox import default_tools
from venus_edge.tools.base import Tool, ToolResult
from venus_edge.trajectory import read_journal

pytestmark = pytest.mark.slow
N_CTX = 2_048
QUESTION = "Which Python version added the tomllib module, and what does tomllib.load return?"


@pytest.fixture(scope="module")
def engine(smollm2_gguf, real_model_run):
    with LlamaCppEngine(smollm2_gguf, n_ctx=N_CTX, **real_model_run.engine_args(seed=3)) as engine:
        yield engine


class PaddedSearch:
    """The real corpus search, each result followed by real documentation text up to ``min_tokens`` tokens: one
    result passes any budget below ``min_tokens``, whatever the model searched for."""

    def __init__(self, search: Tool, padding: str) -> None:
        self.name, self.schema, self.search, self.padding = search.name, search.schema, search, padding

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        result = self.search(arguments)
        return ToolResult(f"{result.text}\n\n{self.padding}", result.visited_urls, result.failures, result.attempts)


@pytest.fixture(scope="module")
def tools(docs_corpus, engine):
    [search] = [tool for tool in default_tools([docs_corpus], search_results=5) if tool.name == "search"]
    page = default_tools([docs_corpus])[1]({"url": ["corpus://pydocs/library/json.html"], "goal": "everything"})
    padding = page.text * (1 + N_CTX // max(1, len(engine.tokenize(page.text))))
    assert len(engine.tokenize(padding)) > N_CTX, "the padding must pass any budget on its own"
    return [PaddedSearch(search, padding)]


def research(engine, tools, journal, policy, seed):
    # Short strict turns (a grammar's cost grows with its bounds): a turn is at most max_tokens=200 tokens, so the
    # answer reserve stays under 250 and a stubbed or restarted conversation of a few turns fits in 0.75 of the
    # budget. keep_last=0: every result is stubbed at the budget.
    config = AgentConfig(
        strict=True, min_tool_calls=5, max_turns=5, answer_reserve_tokens=150, context_policy=policy, keep_last=0,
        max_summaries=1, seed=seed, sampling=SamplingParams(max_tokens=200),
        grammar_limits=GrammarLimits(reasoning_chars=60, string_chars=40, list_items=1, answer_chars=120),
    )
    agent = Agent(engine, tools, config=config, trajectory_path=journal)
    return collect_events(agent.events(QUESTION))


@pytest.fixture(scope="module")
def runs(engine, tools, tmp_path_factory, real_model_run):
    folder = tmp_path_factory.mktemp("policies")
    seed = real_model_run.seed(3)
    return {policy: research(engine, tools, folder / f"{policy}.jsonl", policy, seed) + (folder / f"{policy}.jsonl",)
            for policy in ("force-answer", "keep-last-k", "summarize")}


@pytest.mark.parametrize("policy", ["force-answer", "keep-last-k", "summarize"])
def test_no_policy_overflows_the_context_or_cuts_a_turn_silently(runs, policy):
    result, events, journal = runs[policy]
    assert result.termination in ("answered", "answered_token_limit", "answered_max_steps")
    assert result.answer
    [trajectory] = read_journal(journal).trajectories
    for turn in trajectory.turns:
        assert turn.stats["prompt_tokens"] + turn.stats["tokens_decoded"] <= N_CTX
        assert turn.finish_reason != "length"
    assert all(e.prompt_tokens < N_CTX for e in events if isinstance(e, TurnStarted))


def test_force_answer_stops_at_the_budget(runs):
    result, events, _ = runs["force-answer"]
    assert result.termination == "answered_token_limit"
    assert any(isinstance(e, LimitReached) and e.limit == "context" for e in events)
    assert not any(isinstance(e, ContextCompacted) for e in events)


def test_force_answer_stops_after_the_first_result(runs):
    """The first result passes the budget on its own: force-answer makes one tool call and answers."""
    result, _, _ = runs["force-answer"]
    assert result.totals.tool_calls == 1, result.totals


@pytest.mark.parametrize("policy", ["keep-last-k", "summarize"])
def test_compacting_policies_keep_researching_where_force_answer_stops(runs, policy):
    forced, _, _ = runs["force-answer"]
    result, events, _ = runs[policy]
    compactions = [e for e in events if isinstance(e, ContextCompacted)]
    assert compactions and all(e.policy == policy and e.tokens_after < e.tokens_before for e in compactions)
    assert result.totals.tool_calls > forced.totals.tool_calls, (result.totals, forced.totals)


def test_keep_last_k_researches_to_the_turn_limit(runs):
    """Every result is stubbed at once and four bounded turns with their stubs fit in the budget, so keep-last-k
    compacts after each of the first four calls and makes all five."""
    result, events, _ = runs["keep-last-k"]
    assert result.totals.tool_calls == 5, result.totals
    assert sum(isinstance(e, ContextCompacted) for e in events) >= 4


def test_at_a_phone_window_with_default_settings_compacting_policies_cut_results_and_research_on(
        engine, tools, tmp_path, real_model_run):
    """n_ctx 2,048 with the default reserve, keep_last and max_summaries: every search result is larger than the
    budget, so force-answer answers after its first call, while keep-last-k and summarize cut each result to what
    they can keep when it arrives (its observation ends with the cut note), make the calls the grammar asks for and
    end with an answer. Certain for any sampled text: the turns are bounded, and a cut result leaves room for the
    next call."""
    config = {"strict": True, "min_tool_calls": 3, "max_turns": 3, "seed": real_model_run.seed(5),
              "sampling": SamplingParams(max_tokens=200),
              "grammar_limits": GrammarLimits(reasoning_chars=60, string_chars=40, list_items=1, answer_chars=120)}
    outcomes = {}
    for policy in ("force-answer", "keep-last-k", "summarize"):
        agent = Agent(engine, tools, config=AgentConfig(context_policy=policy, **config),
                      trajectory_path=tmp_path / f"{policy}.jsonl")
        result, _ = collect_events(agent.events(QUESTION))
        assert result.termination in ("answered", "answered_token_limit", "answered_max_steps") and result.answer
        [trajectory] = read_journal(tmp_path / f"{policy}.jsonl").trajectories
        assert all(t.stats["prompt_tokens"] + t.stats["tokens_decoded"] <= N_CTX for t in trajectory.turns)
        outcomes[policy] = (result, trajectory)
    forced, _ = outcomes["force-answer"]
    assert forced.totals.tool_calls == 1, forced.totals
    for policy in ("keep-last-k", "summarize"):
        result, trajectory = outcomes[policy]
        assert result.totals.tool_calls > forced.totals.tool_calls, (policy, result.totals)
        assert any("[Cut to fit the context: " in (t.observation or "") for t in trajectory.turns), policy
