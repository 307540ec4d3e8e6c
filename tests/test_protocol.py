"""The wire protocol's rendering: byte-exact against the model's own chat template (parsing: test_parsing.py)."""

from __future__ import annotations

import json
from datetime import date

import jinja2
import llama_cpp
import pytest

from venus_edge import protocol
from venus_edge.grammar import turn_grammar
from venus_edge.protocol import observation, render_messages, render_system_prompt
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA


def _conversation() -> list[dict[str, str]]:
    """A multi-turn trajectory in the reference shape: search, visit, a malformed turn, an answer."""
    search = '{"name": "search", "arguments": {"query": ["tomllib added python version"]}}'
    visit = '{"name": "visit", "arguments": {"url": ["corpus://pydocs/library/tomllib.html"], "goal": "version"}}'
    results = json.dumps(
        [
            {
                "query": "tomllib added python version",
                "web_page_info_list": [
                    {
                        "title": "tomllib — Parse TOML files",
                        "url": "corpus://pydocs/library/tomllib.html",
                        "snippet": "New in 3.11",
                    }
                ],
            }
        ],
        ensure_ascii=False,
    )
    return [
        {"role": "system", "content": render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], date(2026, 11, 30))},
        {"role": "user", "content": "When was tomllib added to Python? Ünïcode — 中文"},
        {"role": "assistant", "content": f"<think>\nI should search.\n</think>\n\n<tool_call>\n{search}\n</tool_call>"},
        {"role": "user", "content": observation(results)},
        # A single newline after </think>, as models often write: the template normalizes it to two.
        {"role": "assistant", "content": f"<think>\n\nOpen the page.\n\n</think>\n<tool_call>\n{visit}\n</tool_call>"},
        {"role": "user", "content": observation("The useful information in corpus://pydocs/library/tomllib.html ...")},
        {"role": "assistant", "content": "<think>\nDone.\n</think>\n\n<answer>\nPython 3.11\n</answer>"},
    ]


def _render_with_template(template: str, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda value, **_: json.dumps(value, ensure_ascii=False)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)


@pytest.mark.parametrize("cut", [2, 4, 6, 7])
def test_rendering_equals_the_qwen3_thinking_template_from_gguf_metadata(tiny_qwen3_gguf, cut):
    """Every prefix of a multi-turn trajectory renders byte-identical to the model's own chat template, read
    from the GGUF metadata our converter wrote."""
    model = llama_cpp.Llama(str(tiny_qwen3_gguf), n_ctx=64, vocab_only=True, verbose=False)
    template = model.metadata["tokenizer.chat_template"]
    messages = _conversation()[:cut]
    for add_generation_prompt in (True, False):
        ours = render_messages(messages, add_generation_prompt=add_generation_prompt)
        theirs = _render_with_template(template, messages, add_generation_prompt)
        assert ours == theirs, (
            f"first difference at {next(i for i, (a, b) in enumerate(zip(ours + '#', theirs + '$')) if a != b)}"
        )


def test_system_prompt_layout():
    text = render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], "2026-03-01")
    assert text.startswith(protocol.PERSONA + "\n\n# Tools\n\n")
    assert text.endswith("</tool_call>\n\nCurrent date: 2026-03-01\n")
    lines = text.split("<tools>\n")[1].split("\n</tools>")[0].split("\n")
    assert [json.loads(line)["function"]["name"] for line in lines] == ["search", "visit"]
    assert lines[0] == json.dumps(SEARCH_SCHEMA)


def test_history_keeps_reasoning_of_every_turn_after_the_question():
    """Tool results come back as user messages that are only <tool_response>: the template keeps every <think>."""
    rendered = render_messages(_conversation(), add_generation_prompt=False)
    assert rendered.count("<think>\n") == 3
    assert "<think>\nOpen the page.\n</think>\n\n<tool_call>" in rendered
    assert rendered.endswith("<answer>\nPython 3.11\n</answer><|im_end|>\n")


def test_generation_prompt_opens_reasoning():
    assert render_messages(_conversation()[:2]).endswith("<|im_start|>assistant\n<think>\n")


def test_turn_grammar_compiles_and_restricts_actions():
    for actions in ("either", "call", "answer"):
        grammar = turn_grammar([SEARCH_SCHEMA, VISIT_SCHEMA], actions=actions)
        llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)
    assert "answer" not in turn_grammar([SEARCH_SCHEMA], actions="call").split("root ::=")[1].split("\n")[0]
    answer_rule = next(line for line in turn_grammar([SEARCH_SCHEMA]).splitlines() if line.startswith("answer ::="))
    assert '"<answer>\\n" [^< \\t\\r\\n]' in answer_rule, (
        f"a blank answer (parsed as empty_answer) is allowed: {answer_rule}"
    )
    with pytest.raises(ValueError, match="cannot express"):
        turn_grammar(
            [{"function": {"name": "t", "parameters": {"properties": {"x": {"type": "object"}}, "required": ["x"]}}}]
        )
