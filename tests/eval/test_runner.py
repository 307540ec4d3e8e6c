"""The evaluation loop on the real agent with scripted turns: rows as samples finish, resume after a kill or a
torn row, the summary's figures checked by hand, the judge and the aggregation wired in."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence

import pytest

from venus_edge.agent import Agent
from venus_edge.eval.data import EvalExample
from venus_edge.eval.judge import LLMJudge
from venus_edge.eval.runner import RESULTS_FILE, read_rows, run_eval
from venus_edge.result import Result
from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
from venus_edge.tools.corpus import Hit
from venus_edge.tools.search import SearchTool

EXAMPLES = [EvalExample("q1", "When was tomllib added?", ("3.11", "Python 3.11")),
            EvalExample("q2", "Default pickle protocol?", ("4",))]
# The answer each (question, sample) gives: q1 right twice out of three, q2 never.
ANSWERS = {("q1", 0): "3.11", ("q1", 1): "3.10", ("q1", 2): "Python 3.11",
           ("q2", 0): "5", ("q2", 1): "5", ("q2", 2): "3"}


class OneHit:
    def search(self, query: str, k: int) -> list[Hit]:
        return [Hit("tomllib", "corpus://pydocs/library/tomllib.html", "New in version 3.11.")]


class Sampler:
    """Scripted rollouts through the real agent loop; raises KeyboardInterrupt after ``kill_after`` samples."""

    def __init__(self, kill_after: int | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.kill_after = kill_after

    def __call__(self, example: EvalExample, indices: Sequence[int]) -> Iterator[tuple[int, Result]]:
        for index in indices:
            if self.kill_after is not None and len(self.calls) == self.kill_after:
                raise KeyboardInterrupt
            self.calls.append((example.id, index))
            engine = ScriptedEngine([tool_call_turn("search", query=["q"]), answer_turn(ANSWERS[(example.id, index)])])
            yield index, Agent(engine, [SearchTool(OneHit())]).run(example.question)


def test_summary_figures_by_hand(tmp_path):
    summary = run_eval(EXAMPLES, Sampler(), out_dir=tmp_path, k=3, aggregate="majority", plot=False)
    # q1: 2 of 3 correct, q2: 0 of 3. pass@1 = (2/3 + 0) / 2; pass@2 = (1 - C(1,2)/C(3,2) + 0) / 2 = 0.5.
    assert summary["pass@1"] == pytest.approx(1 / 3, abs=1e-4) and summary["pass@2"] == 0.5
    assert summary["pass@3"] == 0.5 and summary["em"] == pytest.approx(1 / 3, abs=1e-4)
    # majority: q1 -> "3.11" (3.11 and Python 3.11 normalize apart: tie 1-1-1, first wins) right; q2 -> "5" wrong.
    assert summary["majority@3"] == 0.5
    assert summary["mean_tool_calls"] == 1.0 and summary["mean_turns"] == 2.0
    assert summary["terminations"] == {"answered": 6}
    assert [q["correct"] for q in summary["per_question"]] == [2, 0]
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["pass@1"] == summary["pass@1"] and "| pass@1 | 0.3333 |" in (tmp_path / "summary.md").read_text()


def test_a_killed_run_resumes_without_redoing_finished_samples(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_eval(EXAMPLES, Sampler(kill_after=4), out_dir=tmp_path, k=3, plot=False)
    first = read_rows(tmp_path / RESULTS_FILE)
    assert [(r.id, r.sample) for r in first] == [("q1", 0), ("q1", 1), ("q1", 2), ("q2", 0)]
    again = Sampler()
    summary = run_eval(EXAMPLES, again, out_dir=tmp_path, k=3, plot=False)
    assert again.calls == [("q2", 1), ("q2", 2)], "only the missing samples run"
    rows = read_rows(tmp_path / RESULTS_FILE)
    assert sorted((r.id, r.sample) for r in rows) == sorted(ANSWERS) and rows[:4] == first
    assert summary["samples"] == 6


def test_a_row_torn_by_a_kill_is_run_again(tmp_path):
    run_eval(EXAMPLES[:1], Sampler(), out_dir=tmp_path, k=2, plot=False)
    data = (tmp_path / RESULTS_FILE).read_bytes()
    (tmp_path / RESULTS_FILE).write_bytes(data[: len(data) - 30])  # the second row loses its tail
    again = Sampler()
    run_eval(EXAMPLES[:1], again, out_dir=tmp_path, k=2, plot=False)
    assert again.calls == [("q1", 1)]
    assert [(r.id, r.sample) for r in read_rows(tmp_path / RESULTS_FILE)] == [("q1", 0), ("q1", 1)]


def test_more_samples_later_only_adds_the_new_ones(tmp_path):
    run_eval(EXAMPLES, Sampler(), out_dir=tmp_path, k=1, plot=False)
    more = Sampler()
    run_eval(EXAMPLES, more, out_dir=tmp_path, k=3, plot=False)
    assert more.calls == [("q1", 1), ("q1", 2), ("q2", 1), ("q2", 2)]


class Judge:
    """Says yes exactly when the response contains 3.11 (so "Python 3.11" counts too), malformed for '3'."""

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        response = messages[-1]["content"].split("Response: ")[1].split("\n")[0]
        if response == "3":
            return "no verdict here"
        return f"extracted_final_answer: {response}\nreasoning: r\ncorrect: {'yes' if '3.11' in response else 'no'}"


def test_a_judge_decides_correctness_and_its_failures_are_counted(tmp_path):
    summary = run_eval(EXAMPLES, Sampler(), out_dir=tmp_path, k=3, judge=LLMJudge(Judge()), plot=False)
    rows = read_rows(tmp_path / RESULTS_FILE)
    assert [r.correct for r in rows] == [True, False, True, False, False, False]
    assert summary["judge_accuracy"] == pytest.approx(2 / 6, abs=1e-4) and summary["judge_failures"] == 1


def test_the_plot_is_written(tmp_path):
    run_eval(EXAMPLES, Sampler(), out_dir=tmp_path, k=2)
    assert (tmp_path / "summary.png").read_bytes().startswith(b"\x89PNG")


def test_duplicate_ids_and_k_below_one_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unique"):
        run_eval([EXAMPLES[0], EXAMPLES[0]], Sampler(), out_dir=tmp_path)
    with pytest.raises(ValueError, match="k must be"):
        run_eval(EXAMPLES, Sampler(), out_dir=tmp_path, k=0)
