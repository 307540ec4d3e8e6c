"""The PythonInterpreter tool and its sandbox, with real child processes: each hostile program ends with a clear
observation within its limits, and a session goes on after it. No mocks: the code really forks, allocates, loops,
connects, reads the environment, writes and prints.

Limits are small so each case takes about a second on two shared cores; every assertion is on what the code could
or could not do, never on how long it took (the wall-clock limit bounds each run).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.errors import VenusEdgeError
from venus_edge.session import SessionSettings, python_tool
from venus_edge.testing import ScriptedEngine, answer_turn, collect_events
from venus_edge.toolbox import default_tools
from venus_edge.tools.base import ToolRegistry
from venus_edge.tools.python_interpreter import (
    PYTHON_INTERPRETER_NAME,
    PythonInterpreterTool,
    python_interpreter_off,
    unavailable_tool_text,
)
from venus_edge.tools.sandbox import SandboxLimits, probe_isolation, run_sandboxed

ISOLATION = probe_isolation()
needs_isolation = pytest.mark.skipif(ISOLATION is not None, reason=f"no sandbox namespaces here: {ISOLATION}")
LIMITS = SandboxLimits(wall_time_s=5.0, cpu_time_s=1, memory_bytes=1024**3, max_processes=16,
                       max_output_bytes=2_000)


@pytest.fixture(scope="module")
def tool() -> PythonInterpreterTool:
    if ISOLATION is not None:
        pytest.skip(f"no sandbox namespaces here: {ISOLATION}")
    return PythonInterpreterTool(LIMITS)


def run_code(tool: PythonInterpreterTool, code: str) -> str:
    return tool({"code": code}).text


def sandbox_processes(work_root: Path) -> list[int]:
    """Processes whose working directory lies under ``work_root`` (a sandbox's, still alive)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd").startswith(str(work_root)):
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_code_runs_and_its_output_is_the_observation(tool):
    assert run_code(tool, "import math\nprint(f'The result is: {math.fsum([1, 2, 3]) / 3}')") == "The result is: 2.0"


def test_an_error_shows_its_traceback_and_exit_status(tool):
    text = run_code(tool, "print('before')\n1 / 0")
    assert text.startswith("before\nTraceback"), text
    assert "ZeroDivisionError" in text and text.endswith("[exit status 1]"), text


@needs_isolation
def test_a_fork_bomb_ends_and_leaves_no_process(tmp_path):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    run = run_sandboxed(code, replace(LIMITS, wall_time_s=2.0), work_root=tmp_path)
    assert run.stopped == "wall_time" or run.signal is not None, run
    assert sandbox_processes(tmp_path) == [], "processes of the fork bomb outlived the run"
    assert list(tmp_path.iterdir()) == [], "the temporary directory was not removed"


@needs_isolation
def test_the_process_limit_makes_a_fork_fail(tool):
    code = ("import os, time\nchildren = 0\ntry:\n    for _ in range(100):\n        if os.fork() == 0:\n"
            "            time.sleep(3)\n            os._exit(0)\n        children += 1\nexcept OSError as exc:\n"
            "    print('fork failed after', children, type(exc).__name__)\n")
    text = run_code(tool, code)
    assert "fork failed after" in text and "BlockingIOError" in text, text


def test_an_infinite_loop_is_stopped_at_its_cpu_limit(tool):
    text = run_code(tool, "while True:\n    pass")
    assert text in ("[stopped: the code used up its CPU time of 1 s]",
                    "[stopped: the code ran past its wall-clock limit of 5 s]"), text


def test_sleeping_past_the_wall_clock_is_stopped():
    if ISOLATION is not None:
        pytest.skip(f"no sandbox namespaces here: {ISOLATION}")
    short = PythonInterpreterTool(SandboxLimits(wall_time_s=1.5))
    assert run_code(short, "import time\nprint('start')\ntime.sleep(60)") == \
        "start\n[stopped: the code ran past its wall-clock limit of 1.5 s]"


def test_a_10_gb_allocation_is_a_memory_error(tool):
    text = run_code(tool, "data = bytearray(10 * 1024**3)\nprint('allocated')")
    assert "MemoryError" in text and "allocated" not in text, text


@needs_isolation
def test_no_connection_reaches_a_server_on_the_loopback(tool):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        text = run_code(tool, f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                              f"    print('connected')\nexcept OSError as exc:\n    print('refused:', exc)\n")
        server.setblocking(False)
        with pytest.raises(BlockingIOError):  # a connection made by the child would wait in the backlog
            server.accept()
    assert text.startswith("refused:") and "connected" not in text, text


@needs_isolation
def test_the_parents_environment_and_processes_are_out_of_reach(tool, monkeypatch):
    monkeypatch.setenv("VENUS_TEST_SECRET", "s3cr3t-value")
    code = (f"import os\nprint(sorted(os.environ))\nprint('secret' if 's3cr3t' in str(os.environ) else 'clean')\n"
            f"try:\n    print(open('/proc/{os.getpid()}/environ', 'rb').read())\n"
            f"except OSError as exc:\n    print('no parent:', type(exc).__name__)\n")
    text = run_code(tool, code)
    assert "s3cr3t-value" not in text and "VENUS_TEST_SECRET" not in text, text
    assert "clean" in text and "no parent:" in text, text


@needs_isolation
def test_writing_outside_the_temporary_directory_fails(tool, tmp_path):
    targets = [tmp_path / "outside.txt", Path.home() / "venus-sandbox-escape.txt"]
    code = "import os\nopen('inside.txt', 'w').write('ok')\nprint('inside', open('inside.txt').read())\n" + "".join(
        f"try:\n    open({str(target)!r}, 'w').write('escaped')\n    print('wrote {target.name}')\n"
        f"except OSError as exc:\n    print('refused {target.name}:', exc.strerror)\n" for target in targets)
    text = run_code(tool, code)
    assert "inside ok" in text, text
    for target in targets:
        assert f"refused {target.name}" in text and not target.exists(), text


def test_printing_100_mb_is_cut_to_the_stated_bound(tool):
    text = run_code(tool, "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1_000_000)\n")
    body, note = text.rsplit("\n", 1)
    assert body == "x" * LIMITS.max_output_bytes
    assert note == "[output cut: the code printed more than 2,000 bytes and was stopped there]"


def test_code_that_prints_nothing_is_told_to_print(tool):
    assert run_code(tool, "x = 1") == "[the code ran to its end and printed nothing; print() what you want to see]"


def test_no_code_is_an_error_that_says_where_the_code_goes(tool):
    assert run_code(tool, "  ").startswith("Error: no code to run. Put the Python code between <code> and </code>")


def test_without_python_a_call_gets_the_rl_environments_text():
    """DR-Venus's RL tool server (``custom_call_tool``) answered ``Error: Tool {name} not found`` for a tool it did
    not have; the stand-in is kept out of the prompt's tool list."""
    off = python_tool(SessionSettings())
    registry = ToolRegistry([off])
    assert registry.schemas == []
    call = registry.prepare(PYTHON_INTERPRETER_NAME, {"code": "print(1)"})
    assert call.arguments == {"code": "print(1)"}
    assert registry.run(call).text == "Error: Tool PythonInterpreter not found" == unavailable_tool_text(
        PYTHON_INTERPRETER_NAME)


def test_settings_refuse_the_unsandboxed_flag_without_python_and_python_with_strict():
    with pytest.raises(ValueError, match="goes with python"):
        SessionSettings(python_unsandboxed_network=True)
    with pytest.raises(ValueError, match="grammar has no <code> block"):
        SessionSettings(python=True, strict=True)


def test_a_setup_failure_never_runs_the_code(tmp_path):
    """A sandbox that cannot be set up (here: an interpreter that does not exist) reports why; nothing ran."""
    run = run_sandboxed("open('ran', 'w')", LIMITS, python="/nonexistent/no-python", work_root=tmp_path)
    assert run.setup_error is not None and "no-python" in run.setup_error, run
    assert list(tmp_path.iterdir()) == []


def test_the_tool_refuses_to_start_where_namespaces_are_unavailable():
    """Where ``probe_isolation`` fails (macOS, a container without ``unshare``) the tool refuses to start unless the
    user passes ``--python-unsandboxed-network``; here the check itself is exercised by its result."""
    if ISOLATION is None:
        PythonInterpreterTool(LIMITS)  # starts: the sandbox works here
    else:
        with pytest.raises(VenusEdgeError, match="--python-unsandboxed-network"):
            PythonInterpreterTool(LIMITS)
        assert PythonInterpreterTool(LIMITS, unsandboxed_network=True).isolate is False


def code_turn(code: str) -> str:
    return (f"Let me compute.\n</think>\n\n<tool_call>\n{{\"name\": \"PythonInterpreter\", \"arguments\": {{}}}}\n"
            f"<code>\n{code}\n</code>\n</tool_call>")


def test_a_session_goes_on_after_a_killed_call(tool, docs_corpus):
    """The loop runs the RL-shaped call, the sandbox stops the code, the model sees why and answers next."""
    engine = ScriptedEngine([code_turn("while True:\n    pass"), code_turn("print(6 * 7)"), answer_turn("42")])
    agent = Agent(engine, [*default_tools([docs_corpus]), tool], config=AgentConfig())
    result, _ = collect_events(agent.events("What is six times seven?"))
    observations = [m["content"] for m in result.messages if m["role"] == "user"][1:]
    assert "[stopped: the code" in observations[0], observations
    assert "<tool_response>\n42\n</tool_response>" in observations[1], observations
    assert result.answer == "42"
    assistant = [m["content"] for m in result.messages if m["role"] == "assistant"]
    assert assistant[1].endswith('{"name": "PythonInterpreter", "arguments": {}}\n<code>\nprint(6 * 7)\n</code>\n'
                                 '</tool_call>'), assistant[1]


def test_a_session_without_python_answers_a_call_with_the_rl_text(docs_corpus):
    engine = ScriptedEngine([code_turn("print(1)"), answer_turn("done")])
    agent = Agent(engine, [*default_tools([docs_corpus]), python_interpreter_off()], config=AgentConfig())
    result, _ = collect_events(agent.events("Compute."))
    observations = [m["content"] for m in result.messages if m["role"] == "user"][1:]
    assert observations[0] == "<tool_response>\nError: Tool PythonInterpreter not found\n</tool_response>"
    assert "PythonInterpreter" not in result.messages[0]["content"], "a tool that is off is listed in the prompt"


@pytest.mark.parametrize("command", ["research", "eval", "serve", "mcp"])
def test_the_flags_reach_the_settings_on_every_session_command(command, docs_corpus):
    from venus_edge.cli import build_parser

    parser = build_parser()
    positional = {"research": ["q"], "eval": ["data.jsonl"]}.get(command, [])
    base = [command, *positional, "--corpus", str(docs_corpus)]
    assert SessionSettings.from_args(parser.parse_args([*base, "--python"])).python is True
    assert SessionSettings.from_args(parser.parse_args(base)).python is False


@pytest.mark.parametrize("flags, message", [
    (["--python-unsandboxed-network"], "--python-unsandboxed-network goes with --python"),
    (["--python", "--strict"], "--strict's grammar has no <code> block"),
])
def test_the_python_flags_are_checked_before_anything_loads(flags, message, docs_corpus, capsys):
    from venus_edge.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["research", "q", "--corpus", str(docs_corpus), *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_recorded_python_call_replays_from_its_record_without_running(docs_corpus, tmp_path):
    """``--record`` keeps each code run's output; ``--replay`` answers the same call from it (the clock the code
    printed comes back unchanged, so nothing ran) and a call that was never recorded gets the replay's
    not-recorded text; the tool stays listed with ``--python`` and unlisted without it."""
    clock = "import time\nprint(time.time_ns())"

    def run(settings: SessionSettings, turns: list[str]) -> list[str]:
        tools = [*default_tools([docs_corpus] if settings.replay is None else [],
                                record_dir=settings.record, replay_dir=settings.replay), python_tool(settings)]
        agent = Agent(ScriptedEngine(turns), tools, config=AgentConfig())
        result, _ = collect_events(agent.events("What time is it?"))
        return [m["content"] for m in result.messages if m["role"] == "user"][1:]

    records = tmp_path / "records"
    recorded = run(SessionSettings(python=True, record=records), [code_turn(clock), answer_turn("now")])
    assert re.search(r"<tool_response>\n\d{18,}\n</tool_response>", recorded[0]), recorded
    replayed = run(SessionSettings(python=True, replay=records),
                   [code_turn(clock), code_turn("print('never run')"), answer_turn("now")])
    assert replayed[0] == recorded[0]
    assert "No recorded result for this PythonInterpreter call" in replayed[1], replayed
    assert "\nnever run\n" not in replayed[1], replayed  # named in the message, never printed
    listed = python_tool(SessionSettings(python=True, replay=records))
    unlisted = python_tool(SessionSettings(replay=records))
    assert getattr(listed, "listed", True) is True and getattr(unlisted, "listed", True) is False
