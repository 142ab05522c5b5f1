"""The rewrites of keywords llguidance refuses are exact: on every JSON value hypothesis draws, the
rewritten schema and the original say the same (``jsonschema`` is the oracle), and the rewritten
schema compiles. No model: the schemas themselves are compared."""

from __future__ import annotations

import re

import jsonschema
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llama_ffi.high.constraints import ConstraintError, json_schema_grammar
from llama_ffi.high.constraints.negation import negate, other_strings
from llama_ffi.high.constraints.rewrite import rewritten

KEYS = ["a", "b", "c", "kind"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.sampled_from([0, 1, 2, 2.5, 3, 3.0, -1.5, 1000.0]),  # the bounds the schemas name, and beside them
    st.text(alphabet="ab.<~/", max_size=4),
    st.sampled_from(["a", "b", "ab", "kind", "x.y", "", "a.b"]),
)
containers = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=8,
)
values = st.one_of(scalars, containers)  # bare scalars half the time: bounds are met

KIND_A = {"required": ["kind"], "properties": {"kind": {"const": "a"}}}
KIND_B = {"required": ["kind"], "properties": {"kind": {"enum": ["b", "ab"]}}}
NEGATED = [
    {"required": ["a"]},
    {"required": ["a", "b"]},
    {"enum": ["a", "ab", ""]},
    {"enum": [1, 2.5, None, True, "x.y"]},
    {"const": "a.b"},
    {"const": False},
    {"type": "string"},
    {"type": ["object", "null", "number"]},
    {"minLength": 2},
    {"maxLength": 1},
    {"minItems": 1},
    {"maxItems": 2},
    {"minimum": 3},
    {"exclusiveMaximum": 2.5},
    {"properties": {"a": {"type": "string"}, "b": {"enum": [1, 2]}}},
    {"anyOf": [{"type": "string"}, {"required": ["a"]}]},
    {"allOf": [{"type": "object"}, {"required": ["b"]}]},
    {"not": {"type": "number"}},
    {"type": "object", "required": ["kind"], "title": "annotations are not negated"},
    {"$ref": "#/definitions/kinds"},
    {},
]
REWRITTEN = [
    {"type": "object", "not": {"required": ["a"]}},
    {"not": {"enum": ["a", "b"]}},
    {"properties": {"a": {"not": {"type": "string"}}, "b": {"type": "array", "not": {"maxItems": 1}}}},
    {"oneOf": [{"type": "string"}, {"type": "number"}, {"type": "array"}]},
    {"type": "object", "oneOf": [KIND_A, KIND_B]},
    {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
    {"oneOf": [{"required": ["a"]}, {"minLength": 2}]},
    {"oneOf": [{"$ref": "#/definitions/kinds"}, {"type": "string", "maxLength": 1}]},
    {"dependencies": {"a": ["b", "c"], "b": {"required": ["kind"]}}},
    {"type": "object", "dependentRequired": {"a": ["kind"]}},
    {"type": "object", "if": KIND_A, "then": {"required": ["a"]}, "else": {"required": ["b"]}},
    {"if": {"type": "string"}, "then": {"minLength": 2}},
    {"then": {"required": ["a"]}},
    {"type": "array", "items": {"enum": ["a", "b", "ab"]}, "uniqueItems": True, "maxItems": 2},
    {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
    {"type": "array", "maxItems": 1, "uniqueItems": True},
    {"type": "array", "uniqueItems": False},
    {"type": "string", "pattern": "^(?=.*b)(?=[^.]*$)a"},
    {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "additionalProperties": False, "minProperties": 2},
    {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "additionalProperties": False, "maxProperties": 1},
    {
        "type": "object",
        "properties": {"a": {}, "b": {}, "c": {}, "kind": {"const": "a"}},
        "required": ["kind"],
        "additionalProperties": False,
        "minProperties": 2,
        "maxProperties": 3,
    },
    {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False, "maxProperties": 2},
    {
        "$defs": {
            "tree": {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}
        },
        "properties": {"b": {"$ref": "#/$defs/tree", "description": "a recursive reference's annotations"}},
    },
]
DEFINITIONS = {"kinds": {"type": "object", "required": ["kind"]}}


def validator(schema):
    if isinstance(schema, dict):
        schema = {**schema, "definitions": DEFINITIONS}
    cls = jsonschema.Draft7Validator if "dependencies" in str(schema) else jsonschema.Draft202012Validator
    return cls(schema)


@pytest.mark.parametrize("schema", NEGATED, ids=lambda s: str(s)[:50])
@settings(max_examples=300, deadline=None)
@given(value=values)
def test_negation_accepts_exactly_what_the_schema_rejects(schema, value):
    root = {"definitions": DEFINITIONS}
    negation = negate(schema, lambda ref: root["definitions"][ref.rsplit("/", 1)[1]])
    assert negation is not None, schema
    assert validator(schema).is_valid(value) != validator(negation).is_valid(value), (negation, value)


@pytest.mark.parametrize("schema", REWRITTEN, ids=lambda s: str(s)[:50])
@settings(max_examples=300, deadline=None)
@given(value=values)
@example(value={"kind": "a", "a": 1})  # objects on either side of a property count
@example(value={"kind": "a", "a": 1, "b": "b", "c": None})
def test_a_rewritten_schema_means_what_the_original_means(schema, value):
    schema = {**schema, "definitions": DEFINITIONS}
    equivalent, used = rewritten(schema)
    assert used, "nothing was rewritten"
    assert validator(schema).is_valid(value) == validator(equivalent).is_valid(value), (equivalent, value)


@pytest.mark.parametrize("schema", REWRITTEN, ids=lambda s: str(s)[:50])
def test_what_llguidance_refused_compiles_once_rewritten(schema):
    json_schema_grammar({**schema, "definitions": DEFINITIONS})


def test_a_property_count_no_object_can_meet_is_refused_as_unsatisfiable():
    schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": False, "minProperties": 2}
    assert rewritten(schema)[0]["allOf"] == [False]
    with pytest.raises(ConstraintError, match="nsatisfiable"):
        json_schema_grammar(schema)


@settings(max_examples=500, deadline=None)
@given(
    words=st.lists(st.text(alphabet="ab.<]^-\\", max_size=3), max_size=4),
    text=st.text(alphabet="ab.<]^-\\", max_size=4),
)
def test_other_strings_matches_every_string_but_the_words(words, text):
    assert bool(re.search(other_strings(words), text)) == (text not in words)


@pytest.mark.parametrize(
    ("schema", "keyword", "where"),
    [
        (
            {"properties": {"x": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}},
            "uniqueItems",
            "#/properties/x",
        ),
        ({"type": "object", "oneOf": [{"required": ["a"], "pattern": "a"}, {"required": ["b"]}]}, "oneOf", "#"),
        ({"anyOf": [{"type": "string"}, {"not": {"pattern": "^a"}}]}, "not", "#/anyOf/1"),
        ({"properties": {"x": {"type": "array", "contains": {"const": 1}}}}, "contains", "#/properties/x"),
    ],
)
def test_what_has_no_exact_rewrite_is_refused_naming_keyword_and_place(schema, keyword, where):
    with pytest.raises(ConstraintError, match=re.escape(keyword)) as refused:
        json_schema_grammar(schema)
    assert f"(at {where})" in str(refused.value)


def test_formats_no_draft_defines_are_annotations_and_draft3_names_are_renamed():
    equivalent, used = rewritten(
        {"properties": {"p": {"type": "string", "format": "path"}, "h": {"format": "host-name"}}}
    )
    assert used == {"format"}
    assert equivalent["properties"] == {"p": {"type": "string"}, "h": {"format": "hostname"}}
    pointer, _ = rewritten({"type": "string", "format": "json-pointer"})
    check = jsonschema.Draft202012Validator(pointer)
    assert check.is_valid("/a/b~1c") and check.is_valid("") and not check.is_valid("a/b") and not check.is_valid("/~2")
