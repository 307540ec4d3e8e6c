"""Tool arguments coerced to the schema the way the reference treats what models write, in one place that the
tools, the duplicate-call guard and the replay records share."""

from __future__ import annotations

import pytest

from venus_edge.tools.base import call_key, coerce_arguments, validate_arguments
from venus_edge.tools.errors import ToolArgumentError
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA

TYPED_SCHEMA = {"type": "function", "function": {"name": "typed", "parameters": {"type": "object", "properties": {
    "n": {"type": "integer"}, "x": {"type": "number"}, "flag": {"type": "boolean"}, "opts": {"type": "object"},
    "ids": {"type": "array", "items": {"type": "integer"}}}}}}

UNION_SCHEMA = {"type": "function", "function": {"name": "union", "parameters": {"type": "object", "properties": {
    "opt": {"type": ["string", "null"]}}}}}


@pytest.mark.parametrize(
    "schema, given, expected",
    [
        (SEARCH_SCHEMA, {"query": ["a", "b"]}, {"query": ["a", "b"]}),
        (SEARCH_SCHEMA, {"query": '["a", "b"]'}, {"query": ["a", "b"]}),
        (SEARCH_SCHEMA, {"query": "['a', 'b']"}, {"query": ["a", "b"]}),
        (SEARCH_SCHEMA, {"query": '\n["a", "b"]\n'}, {"query": ["a", "b"]}),
        (SEARCH_SCHEMA, {"query": "a"}, {"query": ["a"]}),
        (SEARCH_SCHEMA, {"query": "[not a list"}, {"query": ["[not a list"]}),
        (SEARCH_SCHEMA, {"query": [7, True]}, {"query": ["7", "true"]}),
        (SEARCH_SCHEMA, {"queries": ["a"]}, {"query": ["a"]}),
        (VISIT_SCHEMA, {"urls": "https://a.example/", "goal": "g"}, {"url": ["https://a.example/"], "goal": "g"}),
        (VISIT_SCHEMA, {"url": ["u"], "goal": ["first goal", "second"]}, {"url": ["u"], "goal": "first goal"}),
        (VISIT_SCHEMA, {"url": ["u"], "goal": 42}, {"url": ["u"], "goal": "42"}),
        (TYPED_SCHEMA, {"n": "5", "x": "2.5", "flag": "true", "opts": '{"a": 1}', "ids": '["1", 2]'},
         {"n": 5, "x": 2.5, "flag": True, "opts": {"a": 1}, "ids": [1, 2]}),
        (TYPED_SCHEMA, {"n": 3.0, "flag": "false"}, {"n": 3, "flag": False}),
        (TYPED_SCHEMA, {"flag": " True "}, {"flag": True}),
        (TYPED_SCHEMA, {"n": "five"}, {"n": "five"}),
        (TYPED_SCHEMA, {"x": "NaN", "n": "Infinity"}, {"x": "NaN", "n": "Infinity"}),  # not numbers a tool can use
        (UNION_SCHEMA, {"opt": "x"}, {"opt": "x"}),
        (UNION_SCHEMA, {"opt": None}, {"opt": None}),
        (UNION_SCHEMA, {"opt": 5}, {"opt": "5"}),
    ],
)
def test_arguments_are_coerced_to_the_schema(schema, given, expected):
    prepared = coerce_arguments(schema, given)
    assert prepared.arguments == expected
    assert bool(prepared.changes) == (given != expected), prepared.changes


def test_arguments_outside_the_schema_are_dropped_and_named():
    prepared = coerce_arguments(VISIT_SCHEMA, {"url": "u", "goal": "g", "max_chars": 100, "headers": {}})
    assert prepared.arguments == {"url": ["u"], "goal": "g"} and prepared.dropped == ("max_chars", "headers")


def test_two_aliases_of_one_argument_keep_the_first():
    prepared = coerce_arguments(SEARCH_SCHEMA, {"queries": ["a"], "querys": ["b"]})
    assert prepared.arguments == {"query": ["a"]} and prepared.dropped == ("querys",)


def test_union_types_validate():
    validate_arguments(UNION_SCHEMA, {"opt": None})
    validate_arguments(UNION_SCHEMA, {"opt": "x"})
    with pytest.raises(ToolArgumentError, match="must be"):
        validate_arguments(UNION_SCHEMA, {"opt": 3})


def test_an_alias_does_not_replace_the_argument_it_names():
    prepared = coerce_arguments(SEARCH_SCHEMA, {"query": ["a"], "queries": ["b"]})
    assert prepared.arguments == {"query": ["a"]} and prepared.dropped == ("queries",)


def test_the_call_key_is_the_same_for_every_spelling_of_one_call():
    spellings = [{"query": "q"}, {"query": ["q"]}, {"query": '["q"]'}, {"queries": "q"}, {"query": ["q"], "page": 2}]
    keys = {coerce_arguments(SEARCH_SCHEMA, s).key for s in spellings}
    assert len(keys) == 1, keys
    assert keys != {call_key("visit", {"query": ["q"]})}
    assert (
        coerce_arguments(SEARCH_SCHEMA, {"query": ["q", "r"]}).key
        != coerce_arguments(SEARCH_SCHEMA, {"query": ["r", "q"]}).key
    )
