"""The two observation styles of DR-Venus's protocol, and everything in which they differ: the one place that knows.

DR-Venus's checkpoints saw two renderings of the same protocol. ``inference`` is the authors' inference code
(``Inference/run_demo.py``, ``Inference/tool_server/``), which our renderer has always followed. ``rl`` is what the
policy saw during the RL stage, read from the released RL rollouts (``Trajectory-Example/RL_Rollout_Trajectories/
*.json`` in inclusionAI/DR-Venus: 586 search and 84 visit observations in 10 rollouts) and the RL loop
(``RL/scrl/llm_agent/dr_agent_loop.py``). Where the rollouts and the released tool code disagree, the rollouts win:
they are what the policy was trained on (the released ``RL/tool_server`` is a copy of the inference tool server,
and its search rendering has no ``date`` key at all).

What differs (``ProtocolStyle``'s fields):

- the system prompt: ``rl`` lists a third tool, ``PythonInterpreter``, after ``search`` and ``visit``; writes each
  tool's description raw inside the JSON text (the PythonInterpreter description's line breaks and double quotes
  unescaped, so that line is not valid JSON); and ends at the date, with no newline after it;
- a search hit: ``inference`` is ``{"title", "url", "snippet"}`` with a dated hit's snippet beginning
  ``Date published: {date}`` and a blank line; ``rl`` is ``{"title", "url", "snippet", "date"}`` on every hit, the
  date ``""`` where the hit has none (all 5,370 hits of the rollouts carry the key; 3,507 of them empty);
- a visit observation: ``inference`` is ``.strip()``'ed; ``rl`` keeps each block's trailing blank line (all 84
  visit observations of the rollouts end ``"\\n\\n"``);
- the notices: a malformed turn, the context limit and the step limit are answered with the RL loop's own
  shorter texts, and the two limit notices come as a plain user message, not inside ``<tool_response>``
  (``dr_agent_loop.py`` replaces the last message with them as they are).

It lives in the tool layer, which imports no protocol (the arrows run from the protocol to the tools): the tools
render their observations from it (``tools.corpus``, ``tools.search``, ``tools.visit``), and ``protocol.render``
assembles the prompt and the notices from it; ``venus_edge.protocol`` exports its names too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

__all__ = [
    "DEFAULT_OBSERVATION_STYLE",
    "OBSERVATION_STYLES",
    "ObservationStyle",
    "ProtocolStyle",
    "observation_style",
    "protocol_style",
    "search_hit",
]

ObservationStyle = Literal["inference", "rl"]
#: The styles, the default first.
OBSERVATION_STYLES: tuple[ObservationStyle, ...] = ("inference", "rl")
#: Today's rendering (the authors' inference code); ``rl`` is chosen explicitly.
DEFAULT_OBSERVATION_STYLE: ObservationStyle = "inference"


@dataclass(frozen=True)
class ProtocolStyle:
    """How one observation style renders what differs between the styles (the module docstring lists it).

    Attributes:
        name: ``inference`` or ``rl``.
        lists_python_interpreter: the system prompt lists ``PythonInterpreter`` after the session's tools, whether
            or not the session can run it.
        raw_descriptions: tool descriptions are written into the schema's JSON text as they are, unescaped.
        prompt_final_newline: the system prompt ends with a newline after the date line.
        search_date_key: every search hit has a ``date`` key (``""`` when undated); otherwise a date goes into the
            snippet as ``Date published: {date}`` and a blank line.
        strip_visit: the visit observation is ``.strip()``'ed.
        format_error_notice: the observation text that answers a turn that could not be parsed.
        context_limit_notice: the text asking for the final answer at the context limit.
        step_limit_notice: the text asking for the final answer at the turn limit.
        limit_notice_as_observation: the two limit notices come inside ``<tool_response>``; otherwise as a plain
            user message.
    """

    name: ObservationStyle
    lists_python_interpreter: bool
    raw_descriptions: bool
    prompt_final_newline: bool
    search_date_key: bool
    strip_visit: bool
    format_error_notice: str
    context_limit_notice: str
    step_limit_notice: str
    limit_notice_as_observation: bool


# Observation texts of the reference inference loop (Inference/run_demo.py), verbatim: the model saw them.
_INFERENCE = ProtocolStyle(
    name="inference",
    lists_python_interpreter=False,
    raw_descriptions=False,
    prompt_final_newline=True,
    search_date_key=False,
    strip_visit=True,
    format_error_notice=(
        "ERROR!\nPlease call a tool with the correct format, or if you are ready to answer, provide the entire final "
        "answer in `<answer></answer>` tags."
    ),
    context_limit_notice=(
        "You have reached the maximum context length. Based on the information and knowledge you have gathered, "
        "please provide the entire final answer in `<answer></answer>` tags now."
    ),
    step_limit_notice=(
        "You've reached the maximum number of tool calls. Based on the information and knowledge you have gathered, "
        "please provide the entire final answer in `<answer></answer>` tags now."
    ),
    limit_notice_as_observation=True,
)

# The RL loop's texts (RL/scrl/llm_agent/dr_agent_loop.py, DRAgentLoop.run), verbatim.
_RL = ProtocolStyle(
    name="rl",
    lists_python_interpreter=True,
    raw_descriptions=True,
    prompt_final_newline=False,
    search_date_key=True,
    strip_visit=False,
    format_error_notice="Your response was malformed. Please call a tool or provide a final answer.",
    context_limit_notice=(
        "You have reached the maximum context length. Provide your final answer in <answer></answer> tags now."
    ),
    step_limit_notice=(
        "You've reached the maximum number of tool calls. Provide your final answer in <answer></answer> tags now."
    ),
    limit_notice_as_observation=False,
)

_STYLES: dict[str, ProtocolStyle] = {style.name: style for style in (_INFERENCE, _RL)}


def protocol_style(name: str | ProtocolStyle = DEFAULT_OBSERVATION_STYLE) -> ProtocolStyle:
    """The style called ``name`` (a ``ProtocolStyle`` is returned as it is).

    Raises:
        ValueError: ``name`` is no style; the message names the styles.
    """
    if isinstance(name, ProtocolStyle):
        return name
    style = _STYLES.get(name) if isinstance(name, str) else None
    if style is None:
        raise ValueError(f"observation style {name!r} is not one of {', '.join(OBSERVATION_STYLES)} (inference: the "
                         "authors' inference code, rl: the RL rollouts)")
    return style


def observation_style(name: object) -> ObservationStyle:
    """``name`` as an ``ObservationStyle``, checked (a journal's or a request's value).

    Raises:
        ValueError: ``name`` is no style.
    """
    return protocol_style(cast(str, name)).name


def search_hit(title: str, url: str, snippet: str, date: str | None,
               style: str | ProtocolStyle = DEFAULT_OBSERVATION_STYLE) -> dict[str, str]:
    """One search result as the observation's JSON shows it in ``style`` (``date``: the source's date, or None).

    ``inference``: ``{"title", "url", "snippet"}``, a dated snippet beginning ``Date published: {date}`` and a blank
    line (PROTOCOL.md). ``rl``: ``{"title", "url", "snippet", "date"}``, the date ``""`` when there is none.
    """
    if protocol_style(style).search_date_key:
        return {"title": title, "url": url, "snippet": snippet, "date": date or ""}
    return {"title": title, "url": url, "snippet": f"Date published: {date}\n\n{snippet}" if date else snippet}
