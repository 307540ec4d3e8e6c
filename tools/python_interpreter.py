"""The ``PythonInterpreter`` tool of DR-Venus's RL stage: its schema as the RL rollouts' system prompt lists it.

Source: the system message of every released RL rollout (``Trajectory-Example/RL_Rollout_Trajectories/*.json`` in
inclusionAI/DR-Venus); the RL loop's parser (``RL/scrl/llm_agent/dr_agent_loop.py``) reads the code from a
``<code>...</code>`` block after the call's JSON. The rollouts' prompt writes this description raw inside the JSON
text, its line breaks and double quotes unescaped (so that line of the ``<tools>`` block is not valid JSON); the
protocol's renderer reproduces that byte for byte.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PYTHON_INTERPRETER_NAME", "PYTHON_INTERPRETER_SCHEMA"]

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
