"""The ``PythonInterpreter`` tool of DR-Venus's RL stage: its schema as the RL rollouts' system prompt lists it, the
tool that runs the code in the sandbox (``PythonInterpreterTool``, ``venus_edge.tools.sandbox``), and the tool that
stands in for it when it is off (``UnavailableTool``).

Source: the system message of every released RL rollout (``Trajectory-Example/RL_Rollout_Trajectories/*.json`` in
inclusionAI/DR-Venus); the RL loop's parser (``RL/scrl/llm_agent/dr_agent_loop.py``) reads the code from a
``<code>...</code>`` block after the call's JSON. The rollouts' prompt writes this description raw inside the JSON
text, its line breaks and double quotes unescaped (so that line of the ``<tools>`` block is not valid JSON); the
protocol's renderer reproduces that byte for byte.

The call: ``{"name": "PythonInterpreter", "arguments": {}}`` then the code in ``<code>...</code>`` inside the
``<tool_call>`` block; the parser (``venus_edge.protocol.parse``) puts the code in the ``code`` argument, which
``ARGUMENTS_SCHEMA`` declares (the prompt's schema lists none). The observation is what the code printed, standard
output and errors interleaved, cut at ``SandboxLimits.max_output_bytes`` with a note saying so, and a last line in
brackets when the code did not end normally (exit status, the limit that stopped it).

Departures from the reference:
1. The RL environment of the released rollouts had no Python tool: its ``custom_call_tool``
   (``RL/tool_server/execute_tools.py``) answers ``Error: Tool PythonInterpreter not found``, which is what
   ``UnavailableTool`` answers (no released rollout calls it). Ours runs the code only when the user turns it on.
2. The reference prompt promises "a sandboxed environment" and names none; ours is a child process in its own
   namespaces with limits (``venus_edge.tools.sandbox``), with no network.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Any

from venus_edge.tools.base import Deadline, ToolFailure, ToolResult
from venus_edge.tools.errors import SandboxUnavailable
from venus_edge.tools.sandbox import SandboxLimits, SandboxRun, probe_isolation, run_sandboxed

__all__ = [
    "ARGUMENTS_SCHEMA",
    "PYTHON_INTERPRETER_NAME",
    "PYTHON_INTERPRETER_SCHEMA",
    "PythonInterpreterTool",
    "UnavailableTool",
    "observation_text",
    "python_interpreter_off",
    "unavailable_tool_text",
]

PYTHON_INTERPRETER_NAME = "PythonInterpreter"

PYTHON_INTERPRETER_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": PYTHON_INTERPRETER_NAME,
        "description": (
            "Executes Python code in a sandboxed environment. To use this tool, you must follow this format:\n"
            "1. The 'arguments' JSON object must be empty: {}.\n"
            "2. The Python code to be executed must be placed immediately after the JSON block, enclosed within "
            "<code> and </code> tags.\n\n"
            "IMPORTANT: Any output you want to see MUST be printed to standard output using the print() function.\n\n"
            "Example of a correct call:\n"
            "<tool_call>\n"
            '{"name": "PythonInterpreter", "arguments": {}}\n'
            "<code>\n"
            "import numpy as np\n"
            "# Your code here\n"
            'print(f"The result is: {np.mean([1,2,3])}")\n'
            "</code>\n"
            "</tool_call>"
        ),
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}

#: What the tool's arguments are checked against: the ``code`` the parser reads from the ``<code>`` block (or that the
#: model wrote in the arguments).
ARGUMENTS_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": PYTHON_INTERPRETER_NAME,
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": []},
    },
}


def unavailable_tool_text(name: str) -> str:
    """What the RL environment answered a call of a tool it did not have (``custom_call_tool`` in
    ``RL/tool_server/execute_tools.py``)."""
    return f"Error: Tool {name} not found"


class UnavailableTool:
    """A tool that is off: its calls get the RL environment's text for a tool it did not have, and it is not listed
    in the system prompt (``listed = False``), so the inference prompt stays as it was.

    A model trained on the RL prompt (which lists ``PythonInterpreter``) may call it although the prompt does not
    list it; it then gets the answer its training gave, not a format error and a retry.
    """

    listed = False

    def __init__(self, schema: dict[str, Any], *, arguments: dict[str, Any] | None = None) -> None:
        self.schema = schema
        self.name = str(schema["function"]["name"])
        self.arguments_schema = arguments

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(unavailable_tool_text(self.name),
                          failures=(ToolFailure("not_found", self.name, "the tool is off in this session"),))


def python_interpreter_off() -> UnavailableTool:
    """The ``PythonInterpreter`` of a session without ``--python``."""
    return UnavailableTool(PYTHON_INTERPRETER_SCHEMA, arguments=ARGUMENTS_SCHEMA)


class PythonInterpreterTool:
    """Runs the model's Python code in the sandbox and shows what it printed.

    Args:
        limits: the sandbox's limits (default ``SandboxLimits()``: wall clock, CPU, memory, processes, output).
        unsandboxed_network: run although this machine cannot make the sandbox's namespaces (no network or
            filesystem isolation then; the limits, the unprivileged uid and the clean environment still hold). The
            user's ``--python-unsandboxed-network``.
        work_root: where each run's temporary directory is made (default: the system's temporary folder).

    Raises:
        SandboxUnavailable: the namespaces cannot be made here and ``unsandboxed_network`` is False; the message
            says why and what to pass.
    """

    name = PYTHON_INTERPRETER_NAME
    schema = PYTHON_INTERPRETER_SCHEMA
    arguments_schema = ARGUMENTS_SCHEMA

    def __init__(self, limits: SandboxLimits | None = None, *, unsandboxed_network: bool = False,
                 work_root: str | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.work_root = work_root
        self.unavailable_reason = probe_isolation()
        if self.unavailable_reason is not None and not unsandboxed_network:
            raise SandboxUnavailable(
                f"the Python tool cannot isolate its code here ({self.unavailable_reason}); pass "
                f"--python-unsandboxed-network to run code with its limits but with the network and the files this "
                f"user may write within its reach, or leave --python off")
        self.isolate = self.unavailable_reason is None

    def __call__(self, arguments: dict[str, Any], *, deadline: Deadline | None = None) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolResult("Error: no code to run. Put the Python code between <code> and </code> after the "
                              "call's JSON, inside the <tool_call> block.",
                              failures=(ToolFailure("bad_arguments", self.name, "no code"),))
        limits = self.limits
        if deadline is not None and deadline.left_s() < limits.wall_time_s:  # the session's time limit binds too
            limits = replace(limits, wall_time_s=max(deadline.left_s(), 0.1))
        run = run_sandboxed(code, limits, isolate=self.isolate, work_root=self.work_root)
        failures = () if run.exit_code == 0 and not run.output_cut else (
            ToolFailure(_failure_kind(run), self.name, observation_text(run, limits).rsplit("\n", 1)[-1]),)
        return ToolResult(observation_text(run, limits), failures=failures)


def _failure_kind(run: SandboxRun) -> str:
    if run.setup_error is not None:
        return "backend_error"
    if run.stopped == "wall_time" or run.signal == signal.SIGXCPU:
        return "timeout"
    if run.stopped == "output":
        return "too_large"
    return "code_error"


def observation_text(run: SandboxRun, limits: SandboxLimits) -> str:
    """What the model sees of a run: the output, then a line in brackets when it did not simply end with status 0.

    A run that printed nothing and ended well says so, so that the model learns to ``print()`` what it wants.
    """
    if run.setup_error is not None:
        return f"Error: the Python sandbox could not be set up, so the code did not run ({run.setup_error})."
    notes = []
    if run.output_cut:
        notes.append(f"[output cut: the code printed more than {limits.max_output_bytes:,} bytes and was stopped "
                     f"there]")
    if run.stopped == "wall_time":
        notes.append(f"[stopped: the code ran past its wall-clock limit of {limits.wall_time_s:g} s]")
    elif run.signal == signal.SIGXCPU or (run.signal == signal.SIGKILL and not run.stopped):
        notes.append(f"[stopped: the code used up its CPU time of {limits.cpu_time_s} s]"
                     if run.signal == signal.SIGXCPU else "[killed (SIGKILL), e.g. at the CPU or memory limit]")
    elif run.signal is not None:
        notes.append(f"[ended by signal {signal.Signals(run.signal).name}]")
    elif run.exit_code not in (0, None):
        notes.append(f"[exit status {run.exit_code}]")
    output = run.output.rstrip("\n")
    if not output and not notes:
        return "[the code ran to its end and printed nothing; print() what you want to see]"
    return "\n".join(part for part in (output, *notes) if part)
