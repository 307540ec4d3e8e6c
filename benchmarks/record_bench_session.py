"""Record the session ``venus-edge bench`` replays (``venus_edge/bench/data/session.jsonl``).

    .venv/bin/python benchmarks/record_bench_session.py [--corpus /usr/share/doc/python3.11/html]

A scripted researcher (the turns below: reasoning, tool calls and the answer, in DR-Venus's protocol) runs
through the real agent loop over the real Python documentation, so the tool results in the journal are the ones
``search`` and ``visit`` (extractive, no model) return. The bench replays its prompts on each model, so the
work is the same for every quant type; the text is a plausible research, not a model's.
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

from venus_edge.agent import Agent, AgentConfig
from venus_edge.bench.measure import shipped_session_path
from venus_edge.testing import ScriptedEngine
from venus_edge.toolbox import close_tools, default_tools

QUESTION = (
    "Which pickle protocol does Python 3.11 use by default, and in which Python version did it become the default?"
)


def _call(thought: str, name: str, **arguments: object) -> str:
    return f"{thought}\n</think>\n\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


TURNS = [
    _call("The question is about the pickle module's default protocol. I should search the documentation for the "
          "default protocol first.", "search", query=["pickle DEFAULT_PROTOCOL default protocol version"]),
    _call("The pickle library page should state the value of pickle.DEFAULT_PROTOCOL. Let me read it.", "visit",
          url=["corpus://html/library/pickle.html"], goal="the value of pickle.DEFAULT_PROTOCOL and when it changed"),
    _call("The page says the default protocol is 4 and that it became the default in Python 3.8. Let me confirm "
          "in the What's New document of 3.8.", "search", query=["What's New Python 3.8 pickle protocol 4 default"]),
    _call("The What's New in Python 3.8 page should mention the change of the default protocol.", "visit",
          url=["corpus://html/whatsnew/3.8.html"], goal="the change of pickle's default protocol"),
    "Both pages agree: the default pickle protocol is 4, the default since Python 3.8.\n</think>\n\n<answer>\n"
    "Python 3.11 pickles with protocol 4 by default (pickle.DEFAULT_PROTOCOL == 4); protocol 4 became the default "
    "in Python 3.8 (corpus://html/library/pickle.html, corpus://html/whatsnew/3.8.html).\n</answer>",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("/usr/share/doc/python3.11/html"))
    parser.add_argument("--out", type=Path, default=shipped_session_path())
    args = parser.parse_args()
    tools = default_tools([args.corpus], completer=None)
    try:
        args.out.unlink(missing_ok=True)
        config = AgentConfig(today=date(2026, 12, 1))
        result = Agent(ScriptedEngine(list(TURNS)), tools, config=config, trajectory_path=args.out).run(QUESTION)
    finally:
        close_tools(tools)
    print(result.termination, result.sources, args.out, args.out.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
