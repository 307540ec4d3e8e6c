"""The two observation styles against the authors' files, byte for byte (``venus_edge.tools.observation_styles``).

The fixtures (``tests/fixtures/dr_venus/rl_rollouts.json``) are a few messages copied from DR-Venus's released files;
the file says which: the RL rollouts' system message and some of their search and visit observations, and the
inference code's system prompt. The tests render the same things from their parts and compare the bytes.
"""

from __future__ import annotations

import argparse
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from venus_edge import protocol
from venus_edge.agent import Agent, AgentConfig
from venus_edge.flags import OBSERVATION_STYLE_CHOICES, add_session_arguments
from venus_edge.session import SessionSettings
from venus_edge.testing import ScriptedEngine
from venus_edge.tools.base import ToolFailure
from venus_edge.tools.corpus import Hit
from venus_edge.tools.python_interpreter import PYTHON_INTERPRETER_SCHEMA
from venus_edge.tools.search import SEARCH_SCHEMA, SearchTool, parse_search_observation
from venus_edge.tools.visit import VISIT_SCHEMA, VisitTool
from venus_edge.trajectory import read_journal

FIXTURES = Path(__file__).parent / "fixtures" / "dr_venus" / "rl_rollouts.json"
ROLLOUT_DATE = "2026-03-01"  # the date line of every rollout's system message


@cache
def authors() -> dict[str, Any]:
    return json.loads(FIXTURES.read_text(encoding="utf-8"))


class _Hits:
    """A search backend that answers each query with the hits given for it; an unknown query fails, as a search
    that found nothing does in the rollouts (an empty ``web_page_info_list``)."""

    def __init__(self, hits: dict[str, list[Hit]]) -> None:
        self.hits = hits

    def search(self, query: str, k: int) -> list[Hit]:
        if not self.hits.get(query):
            raise LookupError(f"no results for {query!r}")
        return self.hits[query][:k]


# ------------------------------------------------------------------------------------------- the system prompt
def test_rl_system_prompt_is_the_rollouts_system_message() -> None:
    expected = authors()["rl_system_prompt"]["content"]
    rendered = protocol.render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], ROLLOUT_DATE, style="rl")
    assert rendered == expected
    assert not rendered.endswith("\n")


def test_rl_system_prompt_lists_python_interpreter_once_when_the_session_has_it() -> None:
    """A session with a PythonInterpreter tool of its own lists it where it stands, not a second time."""
    schemas = [SEARCH_SCHEMA, VISIT_SCHEMA, PYTHON_INTERPRETER_SCHEMA]
    assert protocol.render_system_prompt(schemas, ROLLOUT_DATE, style="rl") == authors()["rl_system_prompt"]["content"]


def test_inference_system_prompt_is_the_inference_codes() -> None:
    expected = authors()["inference_system_prompt"]["content"]
    assert protocol.render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], ROLLOUT_DATE) == expected
    assert protocol.render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], ROLLOUT_DATE, style="inference") == expected


# ------------------------------------------------------------------------------------------- search
@pytest.mark.parametrize("index", range(3))
def test_rl_search_observation_is_the_rollouts(index: int) -> None:
    """The hits of a real rollout observation, searched again and rendered in the rl style, give its text back:
    a ``date`` key on every hit, ``""`` where the hit has no date, and no date in the snippet."""
    entry = authors()["rl_search_observations"][index]
    blocks = parse_search_observation(protocol.observation_text(entry["content"]))
    assert blocks is not None
    hits = {block["query"]: [Hit(h["title"], h["url"], h["snippet"], h["date"] or None)
                             for h in block["web_page_info_list"]] for block in blocks}
    tool = SearchTool(_Hits(hits), style="rl")
    result = tool({"query": [block["query"] for block in blocks]})
    assert protocol.observation(result.text) == entry["content"], f"{entry['file']} message {entry['message']}"


def test_the_fixtures_hold_dated_undated_and_empty_searches() -> None:
    """The golden cases cover the three shapes of the rollouts (a hit with a date, one without, no hit at all)."""
    hits = [hit for entry in authors()["rl_search_observations"]
            for block in json.loads(protocol.observation_text(entry["content"])) for hit in block["web_page_info_list"]]
    assert {bool(hit["date"]) for hit in hits} == {True, False}
    assert all(list(hit) == ["title", "url", "snippet", "date"] for hit in hits)
    assert any(not block["web_page_info_list"] for entry in authors()["rl_search_observations"]
               for block in json.loads(protocol.observation_text(entry["content"])))


def test_inference_search_hit_is_unchanged() -> None:
    """The inference style keeps today's shape: three keys, a date at the head of the snippet."""
    assert Hit("T", "u", "s", "May 1, 2024").to_dict() == {"title": "T", "url": "u",
                                                          "snippet": "Date published: May 1, 2024\n\ns"}
    assert Hit("T", "u", "s").to_dict("inference") == {"title": "T", "url": "u", "snippet": "s"}
    assert Hit("T", "u", "s").to_dict("rl") == {"title": "T", "url": "u", "snippet": "s", "date": ""}


# ------------------------------------------------------------------------------------------- visit
def test_rl_visit_observation_keeps_the_rollouts_trailing_blank_line() -> None:
    """An unreadable page, rendered in the rl style, is the rollout's observation byte for byte (not stripped)."""
    entry = authors()["rl_visit_observation"]
    text = protocol.observation_text(entry["content"])
    url = text.split("The useful information in ", 1)[1].split(" for user goal ", 1)[0]
    goal = text.split(" for user goal ", 1)[1].split(" as follows: \n", 1)[0]
    failure = ToolFailure("unreadable", url, "the page could not be read")
    with VisitTool(style="rl") as rl, VisitTool() as inference:
        assert protocol.observation(rl.failure_result({"url": [url], "goal": goal}, failure).text) == entry["content"]
        assert inference.failure_result({"url": [url], "goal": goal}, failure).text == text.strip()


# ------------------------------------------------------------------------------------------- notices
def test_notices_of_each_style() -> None:
    assert protocol.format_error_message("inference") == protocol.observation(protocol.FORMAT_ERROR_NOTICE)
    assert protocol.format_error_message("rl") == (
        "<tool_response>\nYour response was malformed. Please call a tool or provide a final answer.\n"
        "</tool_response>")
    assert protocol.limit_message("context") == protocol.observation(protocol.CONTEXT_LIMIT_NOTICE)
    assert protocol.limit_message("steps", "rl") == (
        "You've reached the maximum number of tool calls. Provide your final answer in <answer></answer> tags now.")
    for style in protocol.OBSERVATION_STYLES:
        assert protocol.limit_kind(protocol.limit_message("context", style)) == "context"
        assert protocol.limit_kind(protocol.limit_message("steps", style)) == "steps"
    assert protocol.limit_kind(protocol.format_error_message("rl")) is None


def test_an_unknown_style_is_refused_naming_the_styles() -> None:
    with pytest.raises(ValueError, match="'train' is not one of inference, rl"):
        protocol.render_system_prompt([SEARCH_SCHEMA], ROLLOUT_DATE, style="train")
    with pytest.raises(ValueError, match="inference, rl"):
        SessionSettings(corpus=(Path("."),), observation_style="RL")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="inference, rl"):
        AgentConfig(observation_style="none")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- settings, journal
def test_the_flag_reaches_the_session_settings_and_the_agent_config() -> None:
    parser = argparse.ArgumentParser()
    add_session_arguments(parser)
    assert OBSERVATION_STYLE_CHOICES == protocol.OBSERVATION_STYLES
    assert SessionSettings().observation_style == protocol.DEFAULT_OBSERVATION_STYLE
    default = SessionSettings.from_args(parser.parse_args(["--corpus", "."]))
    chosen = SessionSettings.from_args(parser.parse_args(["--corpus", ".", "--observation-style", "rl"]))
    assert default.observation_style == "inference" and chosen.observation_style == "rl"
    assert chosen.agent_config().observation_style == "rl"
    with pytest.raises(SystemExit):
        parser.parse_args(["--corpus", ".", "--observation-style", "train"])


def _search_then_answer(style: str, tmp_path: Path) -> tuple[Agent, Path]:
    hits = {"q": [Hit("Title", "https://example.org/a", "text", None)]}
    engine = ScriptedEngine([
        '<think>\nsearch\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": ["q"]}}\n</tool_call>',
        "<think>\ndone\n</think>\n\n<answer>\nA\n</answer>",
    ])
    journal = tmp_path / f"{style}.jsonl"
    agent = Agent(engine, [SearchTool(_Hits(hits), style=style)],  # type: ignore[arg-type]
                  config=AgentConfig(observation_style=style, today=None), trajectory_path=journal)  # type: ignore[arg-type]
    return agent, journal


@pytest.mark.parametrize("style", ["inference", "rl"])
def test_a_session_says_its_style_and_the_journal_keeps_it(style: str, tmp_path: Path) -> None:
    agent, journal = _search_then_answer(style, tmp_path)
    events = list(agent.events("a question"))
    started = events[0]
    assert started.model["observation_style"] == style  # type: ignore[attr-defined]
    trajectory = read_journal(journal).trajectories[0]
    assert trajectory.header["config"]["observation_style"] == style
    assert AgentConfig.from_dict(trajectory.header["config"]).observation_style == style
    assert trajectory.system_prompt.endswith("\n") is (style == "inference")
    observation = protocol.observation_text(trajectory.turns[0].observation or "")
    assert ('"date": ""' in observation) is (style == "rl")


def test_a_journal_from_before_the_setting_reads_as_inference() -> None:
    assert AgentConfig.from_dict({"max_turns": 3}).observation_style == "inference"


def test_rl_limit_notice_is_a_plain_user_message_as_the_rl_loop_writes_it(tmp_path: Path) -> None:
    """At the turn limit the rl style replaces the last observation with the RL loop's notice as it is (no
    ``<tool_response>``), and the session ends as answered at the step limit."""
    agent, journal = _search_then_answer("rl", tmp_path)
    agent.config = AgentConfig(observation_style="rl", max_turns=1)
    result = agent.run("a question")
    assert result.termination == "answered_max_steps"
    last_prompt = agent.engine.prompts[-1]  # type: ignore[attr-defined]
    notice = protocol.limit_message("steps", "rl")
    assert last_prompt.endswith(f"<|im_start|>user\n{notice}<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert "<tool_response>" not in last_prompt  # the notice replaced the search's observation
    turn = read_journal(journal).trajectories[0].turns[-1]
    assert turn.replaces_last_observation == notice


def test_a_resumed_session_keeps_its_journals_style() -> None:
    """``research --resume`` builds its tools in the style the journal's session started with."""
    from venus_edge.cli import _journal_style

    settings = SessionSettings(corpus=(Path("."),))
    assert _journal_style(settings, {"observation_style": "rl"}).observation_style == "rl"
    assert _journal_style(SessionSettings(observation_style="rl"), {}).observation_style == "inference"
    with pytest.raises(ValueError, match="inference, rl"):
        _journal_style(settings, {"observation_style": "sft"})


@pytest.mark.parametrize("python", [False, True], ids=["python-off", "python-on"])
def test_a_sessions_own_tools_render_the_rollouts_system_prompt(python: bool, tmp_path: Path) -> None:
    """The tools a session builds (``default_tools`` in the rl style, then the PythonInterpreter: the sandboxed tool
    with ``--python``, the unlisted stand-in without) list the three tools exactly as the rollouts' prompt does; in
    the inference style, without ``--python``, the prompt is the inference code's."""
    from venus_edge.session import python_tool
    from venus_edge.toolbox import default_tools
    from venus_edge.tools.base import ToolRegistry

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nSome text.\n", encoding="utf-8")
    for style in ("rl", "inference"):
        settings = SessionSettings(corpus=(str(corpus),), python=python, observation_style=style)  # type: ignore[arg-type]
        tools = [*default_tools([corpus], observation_style=style), python_tool(settings)]
        registry = ToolRegistry(tools)
        rendered = protocol.render_system_prompt(registry.schemas, ROLLOUT_DATE, style=style)
        if style == "rl":
            assert rendered == authors()["rl_system_prompt"]["content"]
        elif not python:
            assert rendered == authors()["inference_system_prompt"]["content"]
        else:  # inference with --python: the tool is listed after search and visit, as valid JSON
            assert rendered.count('"name": "PythonInterpreter"') == 1
            line = next(line for line in rendered.splitlines() if '"name": "PythonInterpreter"' in line)
            assert json.loads(line) == PYTHON_INTERPRETER_SCHEMA
