"""End to end with real models: `venus-edge research` on SmolLM2-135M-Instruct over real Python docs, and the
same loop on a tiny Qwen3 built by our converter, where every prompt token must be evaluated once."""

from __future__ import annotations

import itertools
import json

import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.cli import main, summary_heading
from venus_edge.engines.base import SamplingParams
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.grammar import GrammarLimits
from venus_edge.result import NO_SOURCES
from venus_edge.toolbox import default_tools
from venus_edge.trajectory import read_trajectories

# A strict turn of the CLI's grammar (256 characters of reasoning, up to three strings of 100) is at most ~1,150
# characters, so in ASCII at most ~1,150 tokens: with this --max-tokens no turn is cut whatever SmolLM2 writes.
STRICT_TURN_TOKENS = "1200"
# Strict turns short enough that 512 tokens hold any of them (at least one byte a token, at most four a character).
SHORT_TURNS = GrammarLimits(reasoning_chars=64, string_chars=16, list_items=1, answer_chars=64)
# With the grammar every turn completes, so every session ends with an answer: after its turns, or forced by the
# budget (observations of any length).
ANSWERED = ("answered", "answered_max_steps", "answered_token_limit")


def test_cli_research_with_a_real_model_and_real_documents(smollm2_gguf, docs_corpus, tmp_path, capsys, real_model_run):
    out = tmp_path / "trajectories.jsonl"
    code = main(["research", "When was the tomllib module added to Python?", "--model", str(smollm2_gguf),
                 "--corpus", str(docs_corpus), "--strict", "--min-tool-calls", "2", "--max-turns", "3",
                 "--n-ctx", "8192", "--max-tokens", STRICT_TURN_TOKENS, "--out", str(out), *real_model_run.cli_args()])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    [trajectory] = read_trajectories(out)
    assert stdout.startswith(summary_heading(trajectory.termination, answered=True) + "\n")  # an answer, any ending
    assert "\nSources" in stdout and f"Trajectory: {out}" in stdout
    assert "turn 1: context" in stderr and "tok/s" in stderr
    calls = [turn.tool_call for turn in trajectory.turns if turn.tool_call]
    assert len(calls) >= 2 and {c["name"] for c in calls} <= {"search", "visit"}
    for turn in trajectory.turns:
        if turn.tool_call and turn.tool_call["name"] == "search":
            results = json.loads(turn.observation.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>"))
            assert results[0]["query"] == turn.tool_call["arguments"]["query"][0]
    assert trajectory.termination in ANSWERED and trajectory.answer
    assert trajectory.header["model"]["file_type"] == "Q4_1"


@pytest.mark.parametrize("seed", [0, 1])
def test_required_search_then_visit_reads_a_page_whatever_is_sampled(smollm2_gguf, docs_corpus, tmp_path, capsys,
                                                                    real_model_run, seed):
    """The demo's settings (``--strict --require-calls search,visit``), checked as rules that hold whatever SmolLM2
    samples (the grammar forces them): the first call searches; until a search has found a URL the next call is
    another search, and once one has, the next call is a visit of URLs those searches found; a session that visited
    shows its sources, one that did not says so. (Seed 2 with 2 threads searched twice: its first query found
    nothing.)"""
    out = tmp_path / "t.jsonl"
    code = main(["research", "When was the tomllib module added to Python?", "--model", str(smollm2_gguf),
                 "--corpus", str(docs_corpus), "--strict", "--require-calls", "search,visit", "--extractive-visit",
                 "--max-turns", "3",
                 "--n-ctx", "8192", "--max-tokens", STRICT_TURN_TOKENS, "--out", str(out),
                 *real_model_run.cli_args(seed)])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    [trajectory] = read_trajectories(out)
    calls = [turn for turn in trajectory.turns if turn.tool_call is not None]
    assert calls and calls[0].tool_call["name"] == "search", trajectory.turns[0].content
    found: set[str] = set()
    for turn in calls:  # up to and including the first visit
        due = "visit" if found else "search"
        assert turn.tool_call["name"] == due, (turn.index, found, turn.content)
        if due == "visit":
            assert set(turn.tool_call["arguments"]["url"]) <= found, (turn.tool_call, found)
            break
        found |= {hit["url"] for block in json.loads(turn.observation.removeprefix("<tool_response>\n").removesuffix(
            "\n</tool_response>")) for hit in block["web_page_info_list"]}
    if any(turn.tool_call["name"] == "visit" for turn in calls):
        assert trajectory.sources and set(trajectory.sources) <= found
        assert "\nSources (pages read):\n" in stdout and trajectory.sources[0] in stdout
    else:  # the turn budget ran out before a search found anything to visit (the loop checked the calls)
        assert not trajectory.sources and f"\nSources: {NO_SOURCES}\n" in stdout


def test_tiny_qwen3_session_evaluates_each_prompt_token_once(tiny_qwen3_gguf, docs_corpus, tmp_path, real_model_run):
    journal = tmp_path / "tiny.jsonl"
    # 8K: two observations of any text stay under the budget, so the two calls and a third turn happen
    with LlamaCppEngine(tiny_qwen3_gguf, n_ctx=8192, **real_model_run.engine_args()) as engine:
        config = AgentConfig(strict=True, min_tool_calls=2, max_turns=3, sampling=SamplingParams(max_tokens=512),
                             grammar_limits=SHORT_TURNS, seed=real_model_run.seed(0))
        result = Agent(engine, default_tools([docs_corpus]), config=config, trajectory_path=journal).run("tomllib?")
    assert result.termination in ANSWERED, result.termination
    turns = read_trajectories(journal)[0].turns
    assert len(turns) >= 3
    for previous, turn in itertools.pairwise(turns):
        known = previous.stats["prompt_tokens"] + len(previous.token_ids)
        new = turn.stats["prompt_tokens"] - known
        assert 0 < turn.stats["prompt_tokens_evaluated"] <= new + 1, (turn.index, turn.stats, new)


def test_cli_session_recorded_then_replayed_without_the_corpus(smollm2_gguf, docs_corpus, tmp_path, capsys,
                                                              real_model_run):
    """`--record DIR` then `--replay DIR` (no corpus given): same seed, same model, so the same calls, and every
    observation comes back byte for byte from the records."""
    common = ["research", "When was the tomllib module added to Python?", "--model", str(smollm2_gguf), "--strict",
              "--min-tool-calls", "1", "--max-turns", "1", "--n-ctx", "4096", "--max-tokens", STRICT_TURN_TOKENS,
              "--quiet", *real_model_run.cli_args()]
    records = tmp_path / "records"
    assert (
        main([*common, "--corpus", str(docs_corpus), "--record", str(records), "--out", str(tmp_path / "a.jsonl")]) == 0
    )
    assert main([*common, "--replay", str(records), "--out", str(tmp_path / "b.jsonl")]) == 0, capsys.readouterr().err
    [live] = read_trajectories(tmp_path / "a.jsonl")
    [replayed] = read_trajectories(tmp_path / "b.jsonl")
    observations = [turn.observation for turn in live.turns if turn.tool_call]
    assert len(observations) == 1 and observations[0].startswith("<tool_response>\n")
    assert [turn.observation for turn in replayed.turns if turn.tool_call] == observations
    assert replayed.messages == live.messages
