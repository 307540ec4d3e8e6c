"""Turn parsing as real models write turns: at least as forgiving as the reference parser (json5), tag text
written as content stays content, several blocks, the stripped and canonical history, and where a turn ends.

Each test docstring names the kind of fault; the parametrized inputs are its siblings."""

from __future__ import annotations

import json

import json5
import pytest

from venus_edge import protocol
from venus_edge.protocol import ToolCall, action_complete, assistant_content, canonical_turn, parse_turn, turn_end

TOOLS = ("search", "visit")
SEARCH = '{"name": "search", "arguments": {"query": ["tomllib"]}}'


def turn(generated: str) -> protocol.ParsedTurn:
    return parse_turn(assistant_content(generated), TOOLS)


def call_turn(body: str) -> protocol.ParsedTurn:
    return turn(f"I should look it up.\n</think>\n\n<tool_call>\n{body}\n</tool_call>")


def codes(parsed: protocol.ParsedTurn) -> list[str]:
    return [error.code for error in parsed.errors]


@pytest.mark.parametrize(
    "generated, kind, expected",
    [
        (f"ok\n</think>\n\n<tool_call>\n{SEARCH}\n</tool_call>", "tool_call", []),
        ("ok\n</think>\n\n<answer>\n42\n</answer>", "answer", []),
        (f"ok <tool_call>\n{SEARCH}\n</tool_call>", "tool_call", ["unclosed_think"]),
        (f"I will call <tool_call>{SEARCH}</tool_call>\n</think>\n", "tool_call", ["call_in_reasoning"]),
        (f"ok\n</think>\n<tool_call>\n{SEARCH}\n</tool_call>\nmore", "tool_call", ["text_after_action"]),
        (f"ok\n</think>\nLet me search.\n<tool_call>\n{SEARCH}\n</tool_call>", "tool_call", ["text_before_action"]),
        ('x</think>\n<tool_call>{"name": "search", "arguments": "{\\"query\\": [\\"a\\"]}"}</tool_call>', "tool_call",
         ["string_arguments"]),
        ("x</think>\n<tool_call>search for tomllib</tool_call>", "malformed", ["invalid_json"]),
        ('x</think>\n<tool_call>{"name": "browse", "arguments": {}}</tool_call>', "malformed", ["unknown_tool"]),
        ('x</think>\n<tool_call>{"arguments": {}}</tool_call>', "malformed", ["missing_fields"]),
        ('x</think>\n<tool_call>{"name": "search", "arguments": [1]}</tool_call>', "malformed",
         ["arguments_not_object"]),
        ('x</think>\n<answer>a</answer><tool_call>{"name": "search", "arguments": {}}</tool_call>', "malformed",
         ["ambiguous"]),
        ("x</think>\nThe answer is 42.", "malformed", ["no_action"]),
        ("x</think>\n<answer>\n  \n</answer>", "malformed", ["empty_answer"]),
        ("x</think>\n<answer>\n42", "malformed", ["unclosed_answer"]),
        ('x</think>\n<tool_call>\n{"name": "search", "arguments": {"query": ["tom', "malformed", ["truncated_call"]),
        (f"ok\n</think>\n\n<tool_call>\n{SEARCH}", "tool_call", ["unclosed_call"]),
    ],
)
def test_parse_turn(generated, kind, expected):
    """Each departure from the trained format gets its code, and only the fatal ones make a turn unusable."""
    parsed = turn(generated)
    assert parsed.kind == kind, parsed.errors
    assert codes(parsed) == expected
    assert parsed.well_formed == (not expected)


def test_missing_think_is_fatal_and_text_before_think_is_not():
    assert parse_turn("no reasoning <answer>1</answer>", TOOLS).kind == "malformed"
    parsed = parse_turn("hello <think>x</think>\n<answer>1</answer>", TOOLS)
    assert parsed.kind == "answer" and codes(parsed) == ["text_before_think"]


def test_unknown_tool_message_names_valid_tools():
    message = call_turn('{"name": "serch", "arguments": {}}').errors[0].message
    assert "search, visit" in message and "Did you mean search?" in message


# ------------------------------------------------------------------------------------- call bodies


JSON5_BODIES = {
    "single quotes": "{'name': 'search', 'arguments': {'query': ['tomllib']}}",
    "trailing commas": '{"name": "search", "arguments": {"query": ["tomllib"],},}',
    "line comment": '{"name": "search", // the tool\n "arguments": {"query": ["tomllib"]}}',
    "block comment": '{"name": "search", /* why */ "arguments": {"query": ["tomllib"]}}',
    "unquoted keys": '{name: "search", arguments: {query: ["tomllib"]}}',
    "mixed quotes": '{"name": \'search\', "arguments": {\'query\': ["tomllib"]}}',
}
REPAIRED_BODIES = {
    "python literals": '{"name": "search", "arguments": {"query": ["tomllib"], "safe": True, "page": None}}',
    "missing closing brace": '{"name": "search", "arguments": {"query": ["tomllib"]}',
    "code fence": '```json\n{"name": "search", "arguments": {"query": ["tomllib"]}}\n```',
    "doubled braces": '{{"name": "search", "arguments": {"query": ["tomllib"]}}}',
    "raw newline in a string": '{"name": "search", "arguments": {"query": ["toml\nlib"]}}',
}
SHAPES = {
    "parameters for arguments": '{"name": "search", "parameters": {"query": ["tomllib"]}}',
    "OpenAI function wrapper": '{"type": "function", "function": {"name": "search", "arguments": {"query": '
                               '["tomllib"]}}}',
    "a list of one call": '[{"name": "search", "arguments": {"query": ["tomllib"]}}]',
}


@pytest.mark.parametrize("body", JSON5_BODIES.values(), ids=JSON5_BODIES.keys())
def test_json5_bodies_run_like_the_reference_parser(body):
    """Whatever the reference's json5.loads reads runs here too, recorded as lenient_json (non-fatal)."""
    assert isinstance(json5.loads(body), dict), "the reference reads this body"
    parsed = call_turn(body)
    assert parsed.kind == "tool_call" and parsed.tool_call == ToolCall("search", {"query": ["tomllib"]})
    assert codes(parsed) == ["lenient_json"] and not parsed.well_formed


@pytest.mark.parametrize("body", REPAIRED_BODIES.values(), ids=REPAIRED_BODIES.keys())
def test_slips_beyond_json5_are_repaired(body):
    """Python literals, a missing brace, code fences, doubled braces and raw newlines are mended (json-repair)."""
    with pytest.raises(ValueError):
        json5.loads(body)
    parsed = call_turn(body)
    assert parsed.kind == "tool_call" and parsed.tool_call.name == "search", parsed.errors
    assert parsed.tool_call.arguments["query"] in (["tomllib"], ["toml\nlib"])
    assert codes(parsed) == ["repaired_json"]


@pytest.mark.parametrize("body", SHAPES.values(), ids=SHAPES.keys())
def test_other_call_shapes_are_read(body):
    parsed = call_turn(body)
    assert parsed.tool_call == ToolCall("search", {"query": ["tomllib"]}) and codes(parsed) == ["call_shape"]


@pytest.mark.parametrize("body", [*JSON5_BODIES.values(), *REPAIRED_BODIES.values(), *SHAPES.values()])
def test_the_history_keeps_the_canonical_well_formed_turn(body):
    """A turn that needed leniency enters the history rebuilt canonically (strict JSON, trained layout): the
    rebuilt turn parses well-formed to the same call, and the text as generated stays in ``generated``."""
    parsed = call_turn(body)
    assert parsed.content == canonical_turn(parsed.reasoning, tool_call=parsed.tool_call)
    assert parsed.generated != parsed.content and body.strip() in parsed.generated
    again = parse_turn(parsed.content, TOOLS)
    assert again.well_formed and again.tool_call == parsed.tool_call and again.content == parsed.content
    json.loads(again.content.split("<tool_call>\n")[1].split("\n</tool_call>")[0])


def test_a_well_formed_turn_enters_the_history_as_generated():
    """No rewrite of a well-formed turn, even with compact JSON: its sampled tokens stay in the KV cache."""
    generated = 'ok\n</think>\n\n<tool_call>\n{"name":"search","arguments":{"query":["a"]}}\n</tool_call>'
    parsed = turn(generated)
    assert parsed.well_formed and parsed.content == parsed.generated == "<think>\n" + generated


# ------------------------------------------------------------------------------------- tags as content

TAGS = ["</tool_call>", "<tool_call>", "</answer>", "<answer>", "</think>", "<think>", "<tool_response>",
        "</tool_response>"]


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_tag_inside_a_string_argument_is_text(tag, quote):
    """A goal that mentions a tag does not end the call: the body ends where its JSON value ends."""
    goal = f"what the {tag} tag means"
    body = f'{{"name": "visit", "arguments": {{"url": ["https://a.example/"], "goal": {quote}{goal}{quote}}}}}'
    parsed = call_turn(body)
    assert parsed.kind == "tool_call", parsed.errors
    assert parsed.tool_call.arguments["goal"] == goal


@pytest.mark.parametrize("tag", [tag for tag in TAGS if tag != "</answer>"])
def test_a_tag_written_inside_an_answer_is_text(tag):
    answer = f"Close the block with {tag} and nothing else."
    parsed = turn(f"done\n</think>\n\n<answer>\n{answer}\n</answer>")
    assert parsed.kind == "answer" and parsed.answer == answer and parsed.well_formed, parsed.errors


@pytest.mark.parametrize(
    "after, expected",
    [
        ("\nIn short: <answer>Paris</answer>", ["text_after_action", "several_answers"]),
        ("\n<answer>Lyon</answer>", ["several_answers"]),
        (". <answer>Lyon</answer>", ["text_after_action", "several_answers"]),
        ("\nNote: I closed with </answer> above.", ["text_after_action"]),
        (" and nothing else.</answer>", ["text_after_action"]),  # the close written as text ends the answer too
        ("\r\n\r\nDone.\r\n</answer>", ["text_after_action"]),
        ("\n</answer>", ["text_after_action"]),
    ],
)
def test_an_answer_ends_at_its_first_close_as_the_reference_reads_it(after, expected):
    """The answer went on to the last ``</answer>`` when text followed the first: "Paris\n</answer>\nIn short:
    <answer>Paris" with no error. The reference (``<answer>(.*?)</answer>``, the RL reward's reading) ends it at the
    first; what follows is recorded and dropped from the history."""
    parsed = turn(f"done\n</think>\n\n<answer>\nParis\n</answer>{after}")
    assert parsed.kind == "answer" and parsed.answer == "Paris" and codes(parsed) == expected, parsed.errors
    assert parsed.content == canonical_turn("done", answer="Paris")


@pytest.mark.parametrize("tag", ["<tool_response>", "</tool_response>", "</tool_call>", "</answer>", "<answer>"])
def test_a_tag_mentioned_in_the_reasoning_is_text(tag):
    parsed = turn(f"Results come back inside {tag} tags.\n</think>\n\n<tool_call>\n{SEARCH}\n</tool_call>")
    assert parsed.kind == "tool_call" and parsed.reasoning == f"Results come back inside {tag} tags."


@pytest.mark.parametrize("reasoning", ["</think<<think>think>> x", "x <thi<think>nk>", "<<think>/think>x",
                                       "x </th</think>ink>", "<" * 50 + "think>" * 50 + "x"])
def test_the_history_holds_no_think_tag_that_removing_another_one_made(reasoning):
    """Removing ``<think>`` from ``</think<<think>think>>`` wrote ``</think>`` (one pass of str.replace), and the
    canonical history showed the model a stray think tag."""
    content = canonical_turn(reasoning, answer="42")
    assert content.count(protocol.THINK_OPEN) == 1 and content.count(protocol.THINK_CLOSE) == 1, content
    assert "x" in content


def test_the_reasoning_ends_at_the_think_close_that_an_action_follows():
    parsed = turn(f"I close with </think> when done.\n</think>\n\n<tool_call>\n{SEARCH}\n</tool_call>")
    assert parsed.kind == "tool_call" and parsed.reasoning == "I close with </think> when done."
    assert codes(parsed) == ["unbalanced_think"], "quoted think tags still fail the strict format check"


# ------------------------------------------------------------------------------------- several blocks


@pytest.mark.parametrize(
    "broken",
    ["search for tomllib", '{"name": "serch", "arguments": {}}', '{"name": "search", "arguments": [1]}',
     '{"name": "search"}'],
)
def test_a_broken_first_call_does_not_sink_a_valid_second_one(broken):
    parsed = turn(f"x\n</think>\n\n<tool_call>\n{broken}\n</tool_call>\n<tool_call>\n{SEARCH}\n</tool_call>")
    assert parsed.kind == "tool_call" and parsed.tool_call == ToolCall("search", {"query": ["tomllib"]})
    assert codes(parsed) == ["several_calls", "skipped_call"] and parsed.usable
    assert parsed.content == canonical_turn("x", tool_call=parsed.tool_call)


def test_the_first_of_two_valid_calls_runs_and_the_second_is_recorded():
    second = '{"name": "visit", "arguments": {"url": ["u"], "goal": "g"}}'
    parsed = turn(f"x\n</think>\n<tool_call>\n{SEARCH}\n</tool_call>\n<tool_call>\n{second}\n</tool_call>")
    assert parsed.tool_call.name == "search" and codes(parsed) == ["several_calls"]


def test_two_answers_use_the_first():
    parsed = turn("x\n</think>\n\n<answer>\na\n</answer>\n<answer>\nb\n</answer>")
    assert parsed.answer == "a" and codes(parsed) == ["several_answers"]
    assert parsed.content == "<think>\nx\n</think>\n\n<answer>\na\n</answer>"


# ------------------------------------------------------------------------------------- stripping and the turn's end


@pytest.mark.parametrize("trailer", ["\n", "\n\n", " \n", "\t", "\r\n"])
def test_the_generated_text_is_stored_stripped(trailer):
    """A turn that stopped at the stop string keeps no trailing whitespace before <|im_end|> (the reference
    strips the completion)."""
    completions = (f"ok\n</think>\n\n<tool_call>\n{SEARCH}\n</tool_call>", "ok\n</think>\n\n<answer>\n42\n</answer>")
    for generated in completions:
        content = assistant_content(generated + trailer)
        assert content == "<think>\n" + generated
        assert protocol.render_messages([{"role": "assistant", "content": content}], add_generation_prompt=False) \
            .endswith(("</tool_call><|im_end|>\n", "</answer><|im_end|>\n"))


def test_tool_response_text_ends_a_turn_only_after_its_action():
    reasoning = "Results come back inside <tool_response> tags, so I wait.\n</think>\n\n"
    generated = f"{reasoning}<tool_call>\n{SEARCH}\n</tool_call>\n<tool_response>\ninvented results"
    assert turn_end(generated) == generated.index("\n<tool_response>\ninvented") + 1
    assert not action_complete(reasoning) and action_complete(generated[: turn_end(generated)])
    content = assistant_content(generated)
    assert content.endswith("</tool_call>") and "Results come back inside <tool_response> tags" in content
    # An unclosed call whose JSON is complete is an action too.
    assert turn_end(f"x\n</think>\n<tool_call>\n{SEARCH}\n<tool_response>") is not None
    assert turn_end('x\n</think>\n<tool_call>\n{"name": "search", <tool_response>') is None


# ------------------------------------------------------------------------------------- hostile turns (review)


@pytest.mark.parametrize("depth", [60, 500, 900, 2000, 20_000])
@pytest.mark.parametrize("brackets", ["[]", '{"a": }'])
def test_a_deeply_nested_body_is_invalid_json_not_a_crash(depth, brackets):
    """json and json5 recurse, and so do the walks after them (surrogates, coercion, json.dumps): a body nested
    deeper than MAX_CALL_DEPTH is an unreadable call at every depth, never a RecursionError."""
    open_, close = brackets.split(" ") if " " in brackets else (brackets[0], brackets[1])
    value = open_ * depth + '"a"' + close * depth
    generated = f'x</think>\n<tool_call>\n{{"name": "search", "arguments": {{"query": {value}}}}}\n</tool_call>'
    parsed = turn(generated)
    assert parsed.kind == "malformed" and [e.code for e in parsed.errors if e.fatal] == ["invalid_json"]


def test_nesting_up_to_the_limit_is_a_call():
    value = "[" * 29 + '"a"' + "]" * 29  # with the call object and its arguments: 31 levels
    parsed = turn(f'x</think>\n<tool_call>\n{{"name": "search", "arguments": {{"query": {value}}}}}\n</tool_call>')
    assert parsed.kind == "tool_call"


@pytest.mark.parametrize("blank", ["\n", " ", "\t \n"])
def test_a_code_fence_around_a_long_blank_run_is_read(blank):
    """The fence is stripped in one pass (a backtracking regex took 28 s on 2,000 newlines)."""
    parsed = call_turn("```json" + blank * 3000 + SEARCH + "\n```")
    assert parsed.tool_call == ToolCall("search", {"query": ["tomllib"]}) and codes(parsed) == ["repaired_json"]


QUOTED = '{"name": "search", "arguments": {"query": ["what does </tool_call> mean"]}}'


@pytest.mark.parametrize(
    "generated, kind, expected_codes",
    [
        (f"x</think>\n<tool_call>\n{QUOTED}", "tool_call", ["unclosed_call"]),  # no close tag: the JSON ended
        ('x</think>\n<tool_call>\n{"name": "search", "arguments": {"query": ["what does </tool_call> mean in',
         "malformed", ["truncated_call"]),  # cut off inside the string: never run
        (f"x</think>\n<tool_call>\n{QUOTED}}}\n</tool_call>", "tool_call", ["repaired_json"]),  # an extra brace
        (f"x</think>\n<tool_call>\n```json\n{QUOTED}\n```\n</tool_call>", "tool_call", ["repaired_json"]),
    ],
)
def test_a_quoted_close_tag_never_cuts_the_call(generated, kind, expected_codes):
    parsed = turn(generated)
    assert parsed.kind == kind and codes(parsed) == expected_codes
    if parsed.tool_call:
        assert parsed.tool_call.arguments["query"] == ["what does </tool_call> mean"]


@pytest.mark.parametrize(
    "generated, kind",
    [
        (f"The format says <answer></answer> tags at the end. First I search.\n<tool_call>\n{SEARCH}\n</tool_call>",
         "tool_call"),
        (f"I will give the <answer> later.\n<tool_call>\n{SEARCH}\n</tool_call>", "tool_call"),
        ("A call looks like <tool_call>{...}</tool_call>; I know enough.\n<answer>\n42\n</answer>", "answer"),
    ],
)
def test_without_a_think_close_the_action_is_the_one_the_turn_ends_with(generated, kind):
    parsed = turn(generated)
    assert parsed.kind == kind and codes(parsed) == ["unclosed_think"], parsed.errors


@pytest.mark.parametrize(
    "generated",
    [
        "Hypothesis: <answer>Paris</answer>? Not sure yet, I need to verify. The next step is to",
        f"Option 1: I could call <tool_call>\n{SEARCH}\n</tool_call> but first let me think about",
        f"<answer>Paris</answer> seems likely; <tool_call>{SEARCH}</tool_call> would confirm it, and then",
    ],
)
def test_an_action_in_reasoning_that_never_ended_is_not_acted_on(generated):
    """A turn cut at its token limit in the middle of its reasoning (no ``</think>``) that mentions an answer or a
    call ended the session with that answer or ran that call. Only an action the turn ends with counts; this is
    retried (the reference retries every turn without ``</think>``)."""
    parsed = turn(generated)
    assert parsed.kind == "malformed" and parsed.answer is None and parsed.tool_call is None, parsed.errors
    assert codes(parsed) == ["unclosed_think", "no_action"]


@pytest.mark.parametrize(
    "reasoning",
    ["Hypothesis: <answer>Paris</answer>? Not sure yet, I need to verify.",
     "When done I must write <answer>...</answer> with the final answer. First, search.",
     "I must put the final answer in <answer></answer> tags. So: <answer>Paris</answer>"],
)
def test_an_answer_written_inside_closed_reasoning_is_text(reasoning):
    """Reasoning quotes the answer format the system prompt asks for, or a guess it has not checked: taking it as
    the answer would end the session with "..." or a hypothesis. The turn has no action and is retried."""
    parsed = turn(f"{reasoning}\n</think>\n\nLet me search first.")
    assert parsed.kind == "malformed" and parsed.answer is None and codes(parsed) == ["no_action"]


@pytest.mark.parametrize("tag", ["<answer>", "<tool_call>", "</tool_call>"])
def test_a_call_cut_inside_a_string_that_holds_a_tag_is_truncated(tag):
    """Without </think>, the call the turn was cut in is found by the block scan: a tag inside its string argument
    is text, not a later opening (the model was told "no action" instead of "cut off")."""
    parsed = turn(f'r <tool_call>{{"name": "search", "arguments": {{"query": ["what is {tag} for", "x')
    assert codes(parsed) == ["unclosed_think", "truncated_call"]


def test_an_example_call_in_the_reasoning_does_not_end_the_turn():
    """Reasoning that quotes an example call and then talks about <tool_response> goes on; the real call runs."""
    generated = (f"An example is <tool_call>{SEARCH}</tool_call> and results come in <tool_response> tags.\n"
                 '</think>\n\n<tool_call>\n{"name": "visit", "arguments": {"url": ["u"], "goal": "g"}}\n</tool_call>')
    assert turn_end(generated) is None
    assert turn(generated).tool_call.name == "visit"


@pytest.mark.parametrize(
    "generated",
    [
        f"I will call <tool_call>{SEARCH}</tool_call> now.\n</think>\n",  # call_in_reasoning
        f"<think>again\n</think>\n<tool_call>{SEARCH}</tool_call>",  # a doubled <think>
        f"one </think> two\n</think>\n<tool_call>\n{SEARCH}</tool_call> trailing",  # a quoted </think>
        f"x\n</think>\n<tool_call>\n{SEARCH}</tool_call>\n<tool_call>\n{SEARCH}</tool_call>",
    ],
)
def test_the_canonical_history_is_itself_well_formed(generated):
    """Whatever the turn needed, what enters the history parses back well-formed to the same call: no think tag
    inside the reasoning, no call left inside it."""
    parsed = turn(generated)
    assert parsed.usable and not parsed.well_formed
    again = parse_turn(parsed.content, TOOLS)
    assert again.well_formed and again.tool_call == parsed.tool_call, (parsed.content, again.errors)
    assert parsed.content.count("<tool_call>") == 1 and parsed.content.count("</think>") == 1


# ----------------------------------------------------------------------------------------------- PythonInterpreter

CODE_TOOLS = ("search", "visit", "PythonInterpreter")
EMPTY_CALL = '{"name": "PythonInterpreter", "arguments": {}}'


def code_turn(inside: str) -> protocol.ParsedTurn:
    """A turn whose ``<tool_call>`` block holds ``inside`` (the call's JSON and its ``<code>`` block)."""
    return parse_turn(assistant_content(f"Compute it.\n</think>\n\n<tool_call>\n{inside}"), CODE_TOOLS)


def test_the_rl_loops_code_call_is_well_formed_and_kept_as_written():
    """The RL prompt's shape (RL/scrl/llm_agent/dr_agent_loop.py): empty arguments, the code in a <code> block after
    the JSON; the code is stripped, as the RL loop strips it, and the turn enters the history as generated."""
    code = 'import numpy as np\n# Your code here\nprint(f"The result is: {np.mean([1,2,3])}")'
    parsed = code_turn(f"{EMPTY_CALL}\n<code>\n{code}\n</code>\n</tool_call>")
    assert parsed.well_formed, parsed.errors
    assert parsed.tool_call == ToolCall("PythonInterpreter", {"code": code})
    assert parsed.content == parsed.generated
    assert parsed.content == canonical_turn("Compute it.", tool_call=parsed.tool_call)


@pytest.mark.parametrize("code", [
    'print("</tool_call>")',
    "s = '</code>'\nprint(s)",
    "s = '</code>' + '</tool_call>'\nprint(s)",
    'print("{")  # an unbalanced brace and a " quote',
])
def test_tags_and_quotes_inside_the_code_stay_code(code):
    """The code is Python, not JSON: </tool_call> and </code> inside its strings do not end it; the code ends at the
    first </code> that only whitespace and </tool_call> follow."""
    parsed = code_turn(f"{EMPTY_CALL}\n<code>\n{code}\n</code>\n</tool_call>")
    assert parsed.well_formed, parsed.errors
    assert parsed.tool_call == ToolCall("PythonInterpreter", {"code": code})


def test_code_in_the_arguments_runs_and_the_history_gets_the_code_block():
    """{"code": ...} in the arguments runs (the RL format check passes it), noted as code_in_arguments; the history
    gets the RL prompt's shape, so the model only ever sees the trained format."""
    parsed = code_turn('{"name": "PythonInterpreter", "arguments": {"code": "print(1 + 1)"}}\n</tool_call>')
    assert parsed.usable and codes(parsed) == ["code_in_arguments"]
    assert parsed.tool_call == ToolCall("PythonInterpreter", {"code": "print(1 + 1)"})
    assert parsed.content.endswith(f"<tool_call>\n{EMPTY_CALL}\n<code>\nprint(1 + 1)\n</code>\n</tool_call>")


def test_both_forms_run_the_code_block():
    """A <code> block and arguments.code: the block runs, as in the RL loop (it reads the block first)."""
    body = '{"name": "PythonInterpreter", "arguments": {"code": "print(2)"}}\n<code>\nprint(1)\n</code>\n</tool_call>'
    parsed = code_turn(body)
    assert parsed.usable and codes(parsed) == ["both_code_forms"]
    assert parsed.tool_call == ToolCall("PythonInterpreter", {"code": "print(1)"})
    assert parsed.content.endswith(f"{EMPTY_CALL}\n<code>\nprint(1)\n</code>\n</tool_call>")


@pytest.mark.parametrize("inside, code", [
    (f"{EMPTY_CALL}\n<code>\nprint(1)\n</tool_call>", "unclosed_code"),
    (f"{EMPTY_CALL}\n<code>\nprint('</tool_call>')\n</tool_call>", "unclosed_code"),
    (f"{EMPTY_CALL}\n<code>\nwhile True:\n    pri", "truncated_call"),
    ('{"name": "search", "arguments": {"query": ["x"]}}\n<code>\nprint(1)\n</code>\n</tool_call>',
     "code_for_other_tool"),
])
def test_broken_code_calls_never_run(inside, code):
    """A <code> block without </code> before </tool_call> (the RL loop fails it too), a turn cut off inside its code,
    and a <code> block after another tool's JSON are fatal: half-written code never runs."""
    parsed = code_turn(inside)
    assert parsed.kind == "malformed" and code in codes(parsed), parsed.errors
    assert parsed.tool_call is None


def test_a_code_call_without_the_close_tag_runs_as_an_unclosed_call():
    parsed = code_turn(f"{EMPTY_CALL}\n<code>\nprint(3)\n</code>")
    assert parsed.usable and codes(parsed) == ["unclosed_call"]
    assert parsed.tool_call == ToolCall("PythonInterpreter", {"code": "print(3)"})
    assert action_complete(f"x\n</think>\n<tool_call>\n{EMPTY_CALL}\n<code>\nprint(3)\n</code>")


def test_a_code_call_is_an_unknown_tool_where_the_tool_is_not_given():
    parsed = parse_turn(assistant_content(f"x\n</think>\n<tool_call>\n{EMPTY_CALL}\n<code>\n1\n</code>\n</tool_call>"),
                        TOOLS)
    assert codes(parsed) == ["unknown_tool"]


def test_code_holding_the_close_tags_together_ends_there():
    """The one spelling the rule cannot tell from the end: ``</code>`` then ``</tool_call>`` inside a string. The
    call ends there (the RL loop's regexes end it there too); the rest is text after the action."""
    parsed = code_turn(f"{EMPTY_CALL}\n<code>\ns = '</code></tool_call>'\n</code>\n</tool_call>")
    assert parsed.tool_call == ToolCall("PythonInterpreter", {"code": "s = '"})
    assert codes(parsed) == ["text_after_action"]
