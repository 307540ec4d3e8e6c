"""``--draft lookup|MODEL.gguf|off`` (speculative decoding, issue 27) on the command line: the flag on every command
that loads the in-process engine, its usage errors, the refusals where it does not apply, a draft GGUF with another
vocabulary as a one-line error, and the drafting figures in the progress lines, the summary, the totals and eval's
rows. The real-model session asserts rules that hold whatever SmolLM2 samples (how much it drafts depends on it)."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.cli import _print_result, _Progress, build_parser, main
from venus_edge.eval.data import EvalExample
from venus_edge.eval.records import EvalRow
from venus_edge.eval.report import summarize
from venus_edge.events import SessionFinished
from venus_edge.result import SessionTotals
from venus_edge.session import SessionSettings, SetupError, _load_engine
from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
from venus_edge.toolbox import default_tools
from venus_edge.trajectory import read_trajectories

DRAFTING_FIGURES = ("drafted_tokens", "accepted_tokens", "verify_steps")
# A strict turn of the CLI's grammar fits in this many tokens whatever SmolLM2 writes (tests/test_research.py).
STRICT_TURN_TOKENS = "1200"
# A progress line of a completed turn (cli._Progress), its drafting figures captured when it has them.
TURN_LINE = re.compile(r"^  (?:tool_call|answer|malformed): \d+ tokens at [\d.]+ tok/s, prefill \d+ new / \d+ reused"
                       r"(?:, drafted (\d+), accepted (\d+))?$")


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
    """A model server does not draft in process; several rollouts at once (the batched engine) draft by lookup
    only, so a draft model is refused there: one line naming --draft and what to do, as ``--kv-type`` there. The
    model does not exist: the refusal comes first."""
    out = ["--out", str(tmp_path / "out")] if flags[0] == "eval" else []
    journal = ["--journal", str(tmp_path / "j.jsonl")] if flags[0] == "serve" else []
    server = "--engine" in flags
    draft_model = tmp_path / "draft.gguf"
    draft_model.write_bytes(b"GGUF")
    code = main([*flags, "--model", "/nonexistent/model.gguf", "--corpus", str(docs_corpus),
                 "--draft", "lookup" if server else str(draft_model), *out, *journal])
    assert code == 3
    message = _error_line(capsys)
    assert message.startswith("error: --draft") and "not found" not in message, message
    if server:
        assert "does not apply" in message and "drop --draft" in message, message
    else:
        assert "prompt lookup only" in message and "use --draft lookup" in message, message


def test_several_samples_draft_by_lookup_and_not_with_a_draft_model(smollm2_gguf, tmp_path):
    settings = SessionSettings(model=str(smollm2_gguf), replay=tmp_path, draft=str(smollm2_gguf))
    with pytest.raises(SetupError, match="prompt lookup only"):
        _load_engine(settings, 2)
    engine = _load_engine(replace(settings, draft="lookup", threads=1), 2)
    try:
        assert engine.model_info()["draft"] == "lookup" and engine.model_info()["n_seq"] == 2
    finally:
        engine.close()


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


# ---------------------------------------------------------------------------------------------- the figures


class _DraftingEngine(ScriptedEngine):
    """A scripted engine whose every call reports ``drafted`` drafted tokens and ``accepted`` kept."""

    def __init__(self, turns: list[Any], drafted: int, accepted: int) -> None:
        super().__init__(turns)
        self.drafted, self.accepted = drafted, accepted

    def generate(self, prompt_ids: Any, **kwargs: Any) -> Any:
        completion = super().generate(prompt_ids, **kwargs)
        stats = replace(completion.stats, drafted_tokens=self.drafted, accepted_tokens=self.accepted,
                        verify_steps=2 if self.drafted else 0)
        return replace(completion, stats=stats)


def _run_scripted(engine: ScriptedEngine, docs_corpus: Path, journal: Path) -> tuple[str, str, SessionTotals]:
    """A session on ``engine``: the progress lines and the summary the CLI prints, and its totals."""
    progress_out, summary_out = io.StringIO(), io.StringIO()
    progress = _Progress(progress_out, quiet=False)
    agent = Agent(engine, default_tools([docs_corpus]), config=AgentConfig(), trajectory_path=journal)
    for event in agent.events("When was tomllib added?"):
        progress.show(event)
    assert isinstance(event, SessionFinished)
    _print_result(event.result, summary_out)
    return progress_out.getvalue(), summary_out.getvalue(), event.result.totals


def test_drafted_and_accepted_tokens_show_in_progress_summary_totals_and_journal(docs_corpus, tmp_path):
    engine = _DraftingEngine([tool_call_turn("search", query=["tomllib"]), answer_turn("3.11")], drafted=7,
                             accepted=5)
    progress, summary, totals = _run_scripted(engine, docs_corpus, tmp_path / "t.jsonl")
    turn_lines = [line for line in progress.splitlines() if TURN_LINE.match(line)]
    assert len(turn_lines) == 2 and all(line.endswith(", drafted 7, accepted 5") for line in turn_lines), progress
    assert (totals.drafted_tokens, totals.accepted_tokens, totals.verify_steps) == (14, 10, 4)
    assert "\nSpeculative decoding: 14 tokens drafted, 10 accepted (71%)\n" in summary, summary
    end = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[-1])
    assert {name: end["totals"][name] for name in DRAFTING_FIGURES} == {"drafted_tokens": 14, "accepted_tokens": 10,
                                                                        "verify_steps": 4}


def test_without_drafting_nothing_about_it_is_shown_or_recorded(docs_corpus, tmp_path):
    engine = ScriptedEngine([tool_call_turn("search", query=["tomllib"]), answer_turn("3.11")])
    progress, summary, totals = _run_scripted(engine, docs_corpus, tmp_path / "t.jsonl")
    assert "drafted" not in progress and "Speculative decoding" not in summary
    assert not set(DRAFTING_FIGURES) & set(totals.to_dict())
    end = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[-1])
    assert not set(DRAFTING_FIGURES) & set(end["totals"])


def test_totals_of_a_journal_written_before_drafting_count_none():
    totals = SessionTotals()
    totals.add({"prompt_tokens_evaluated": 3, "tokens_decoded": 2})  # an older turn record's stats
    totals.add({"tokens_decoded": 4, "drafted_tokens": 6, "accepted_tokens": 2, "verify_steps": 3})
    assert (totals.tokens_decoded, totals.drafted_tokens, totals.accepted_tokens, totals.verify_steps) == (6, 6, 2, 3)


def test_eval_reports_the_tokens_drafted_and_accepted_when_any():
    example = EvalExample(id="q1", question="q?", answers=("a",))
    row = EvalRow(id="q1", sample=0, question="q?", answers=["a"], prediction="a", em=1.0, f1=1.0, judge=None,
                  correct=True, termination="answered", turns=1, tool_calls=0, prompt_tokens_evaluated=1,
                  prompt_tokens_reused=0, tokens_decoded=9, prefill_s=0.1, decode_s=0.1, elapsed_s=0.3)
    assert "drafted_tokens" not in summarize([row], [example], 1).data
    drafting = [replace(row, drafted_tokens=8, accepted_tokens=6), replace(row, sample=1, drafted_tokens=2)]
    data = summarize(drafting, [example], 2).data
    assert (data["drafted_tokens"], data["accepted_tokens"], data["acceptance"]) == (10, 6, 0.6)


# ---------------------------------------------------------------------------------------------- a real session


@pytest.mark.slow
def test_research_with_lookup_drafting_reports_its_figures_whatever_is_sampled(smollm2_gguf, docs_corpus, tmp_path,
                                                                              capsys, real_model_run):
    """``research --draft lookup`` on SmolLM2: the engine loads with the drafter, every turn's stats hold the
    drafting figures (accepted never more than drafted; verification steps exactly when something was drafted),
    each turn's progress line shows them exactly when it drafted, and the totals and the summary add them up."""
    out = tmp_path / "t.jsonl"
    code = main(["research", "When was the tomllib module added to Python?", "--model", str(smollm2_gguf),
                 "--corpus", str(docs_corpus), "--strict", "--min-tool-calls", "1", "--extractive-visit",
                 "--max-turns", "1", "--n-ctx", "4096", "--max-tokens", STRICT_TURN_TOKENS, "--no-prompt-cache",
                 "--draft", "lookup", "--out", str(out), *real_model_run.cli_args()])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    [trajectory] = read_trajectories(out)
    assert trajectory.header["model"]["draft"] == "lookup" and trajectory.header["model"]["batch_invariant"]
    lines = [TURN_LINE.match(line) for line in stderr.splitlines() if TURN_LINE.match(line)]
    assert len(lines) == len(trajectory.turns) >= 2, stderr
    for turn, line in zip(trajectory.turns, lines):
        assert line is not None
        drafted, accepted, steps = (turn.stats[name] for name in DRAFTING_FIGURES)
        assert 0 <= accepted <= drafted and (steps > 0) == (drafted > 0), turn.stats
        shown = (int(line.group(1)), int(line.group(2))) if line.group(1) else None
        assert shown == ((drafted, accepted) if drafted else None), (line.group(0), turn.stats)
    totals = trajectory.end["totals"]
    drafted_in_turns = sum(turn.stats["drafted_tokens"] for turn in trajectory.turns)
    if totals.get("drafted_tokens", 0):  # retried samples drafted too, so the totals hold at least the turns'
        assert totals["drafted_tokens"] >= drafted_in_turns and totals["accepted_tokens"] <= totals["drafted_tokens"]
        assert (f"\nSpeculative decoding: {totals['drafted_tokens']:,} tokens drafted, "
                f"{totals['accepted_tokens']:,} accepted (") in stdout, stdout
    else:
        assert drafted_in_turns == 0 and "Speculative decoding" not in stdout
