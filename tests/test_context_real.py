"""Each context policy on a real model past its budget: SmolLM2 under the strict grammar, n_ctx 1024, the real
Python docs corpus. No run may overflow n_ctx or cut a turn silently; keep-last-k and summarize go on researching
where force-answer stops."""

from __future__ import annotations

import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.engines.base import SamplingParams
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.events import ContextCompacted, LimitReached, TurnStarted
from venus_edge.grammar import GrammarLimits
from venus_edge.testing import collect_events
from venus_edge.toolbox import default_tools
from venus_edge.trajectory import read_journal

pytestmark = pytest.mark.slow
N_CTX = 1_024
QUESTION = "Which Python version added the tomllib module, and what does tomllib.load return?"


@pytest.fixture(scope="module")
def engine(smollm2_gguf):
    with LlamaCppEngine(smollm2_gguf, n_ctx=N_CTX, seed=3) as engine:
        yield engine


@pytest.fixture(scope="module")
def tools(docs_corpus):
    return default_tools([docs_corpus], search_results=5)


def research(engine, tools, journal, policy):
    # Short strict turns (a grammar's cost grows with its bounds); keep_last=0: every result is stubbed at the
    # budget, since at this n_ctx the budget is passed after one or two results.
    config = AgentConfig(
        strict=True, min_tool_calls=5, max_turns=5, answer_reserve_tokens=150, context_policy=policy, keep_last=0,
        max_summaries=1, seed=3, sampling=SamplingParams(max_tokens=200),
        grammar_limits=GrammarLimits(reasoning_chars=60, string_chars=40, list_items=1, answer_chars=120),
    )
    agent = Agent(engine, tools, config=config, trajectory_path=journal)
    return collect_events(agent.events(QUESTION))


@pytest.fixture(scope="module")
def runs(engine, tools, tmp_path_factory):
    folder = tmp_path_factory.mktemp("policies")
    return {policy: research(engine, tools, folder / f"{policy}.jsonl", policy) + (folder / f"{policy}.jsonl",)
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


@pytest.mark.parametrize("policy", ["keep-last-k", "summarize"])
def test_compacting_policies_keep_researching_where_force_answer_stops(runs, policy):
    forced, _, _ = runs["force-answer"]
    result, events, _ = runs[policy]
    compactions = [e for e in events if isinstance(e, ContextCompacted)]
    assert compactions and all(e.policy == policy and e.tokens_after < e.tokens_before for e in compactions)
    assert result.totals["tool_calls"] > forced.totals["tool_calls"]
