"""JSON Schema → GBNF (the converter the forced tool-call grammars still use): grammars llama.cpp
accepts, output that validates, clear refusals. Response formats and ``LlamaGrammar.from_json_schema``
go through llguidance (tests/test_constraints.py)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_ffi.high import Llama, LlamaGrammar
from llama_ffi.high.chat.json_schema import UnsupportedSchemaError, schema_to_gbnf


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_threads=2) as model:
        yield model


# ---- llama.cpp's own test corpus -------------------------------------------------------------------
def corpus(tree) -> list[tuple[str, str, str]]:
    """(status, name, schema text) of every case in tests/test-json-schema-to-grammar.cpp."""
    text = (tree.path / "tests" / "test-json-schema-to-grammar.cpp").read_text()
    case = re.compile(r'test\(\{\s*(SUCCESS|FAILURE),\s*"([^"]*)",\s*R"""\((.*?)\)"""', re.S)
    return case.findall(text)


def assert_validates(name: str, text: str, schema: dict) -> None:
    """``text`` is JSON that validates against ``schema`` (jsonschema is the oracle)."""
    validator = jsonschema.validators.validator_for(schema)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError:  # tuple-form "items": draft 7's spelling, which the converter reads
        validator = jsonschema.Draft7Validator
    try:
        jsonschema.validate(json.loads(text), schema, cls=validator)
    except (json.JSONDecodeError, jsonschema.ValidationError) as error:
        pytest.fail(f"{name}: {text!r} does not validate: {error}")


def test_corpus_converts_or_is_refused_by_name(tree):
    cases = corpus(tree)
    assert len(cases) > 60
    converted, refused = [], []
    for status, name, text in cases:
        try:
            schema = json.loads(text)
        except json.JSONDecodeError:
            continue  # some cases test the C++ parser on invalid JSON
        try:
            grammar = schema_to_gbnf(schema)
        except UnsupportedSchemaError as e:
            assert str(e), name
            refused.append(name)
            continue
        if status == "FAILURE":
            pytest.fail(f"{name}: llama.cpp refuses this schema, we converted it")
        LlamaGrammar.from_string(grammar)  # llama.cpp's GBNF parser accepts what we emit
        converted.append(name)
    assert len(converted) >= 30, (len(converted), refused)  # 36 at this pin; the rest use minimum,
    # maximum, pattern, allOf, ... which we refuse by name


def test_corpus_grammars_generate_output_that_validates(tree, llm):
    """Each converted corpus schema, run: the model writes under its grammar, and every reply that
    ends by itself validates against the schema (jsonschema is the oracle)."""
    stopped, cut = [], []
    for _, name, text in corpus(tree):
        try:
            schema = json.loads(text)
            grammar = LlamaGrammar.from_string(schema_to_gbnf(schema))
        except (json.JSONDecodeError, UnsupportedSchemaError):
            continue
        llm.reset()
        out = llm(
            f"A JSON value for the schema {text.strip()[:200]}:\n",
            max_tokens=64,
            grammar=grammar,
            temperature=0.7,
            seed=1,
        )
        choice = out["choices"][0]
        if choice["finish_reason"] != "stop":
            cut.append(name)
            continue
        assert_validates(name, choice["text"], schema)
        stopped.append(name)
    assert len(stopped) >= 25, (len(stopped), cut)


# ---- hypothesis family: output validates -------------------------------------------------------------
def leaf_schemas():
    short_string = st.builds(
        lambda lo, span: {"type": "string", "minLength": lo, "maxLength": lo + span},
        st.integers(0, 3),
        st.integers(1, 8),
    )
    return st.one_of(
        short_string,
        st.just({"type": "integer"}),
        st.just({"type": "number"}),
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
        st.lists(st.sampled_from(["red", "green", 3, None, True]), min_size=1, max_size=4, unique=True).map(
            lambda v: {"enum": v}
        ),
        st.sampled_from(["yes", 42, "fixed"]).map(lambda v: {"const": v}),
        st.sampled_from(["date", "time", "date-time", "uuid"]).map(lambda f: {"type": "string", "format": f}),
    )


def schemas():
    names = st.sampled_from(["name", "id", "age", "color", "tags", "when", "ok", "note"])

    def extend(children):
        obj = st.dictionaries(names, children, min_size=1, max_size=4).flatmap(
            lambda props: st.builds(
                lambda req, extra: {
                    "type": "object",
                    "properties": props,
                    "required": req,
                    **({"additionalProperties": False} if extra else {}),
                },
                st.lists(st.sampled_from(sorted(props)), unique=True),
                st.booleans(),
            )
        )
        arr = st.builds(
            lambda item, lo, span: {"type": "array", "items": item, "minItems": lo, "maxItems": lo + span},
            children,
            st.integers(0, 2),
            st.integers(0, 2),
        )
        any_of = st.lists(children, min_size=2, max_size=3).map(lambda opts: {"anyOf": opts})
        return st.one_of(obj, arr, any_of)

    return st.recursive(leaf_schemas(), extend, max_leaves=6)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=schemas())
def test_schema_mode_output_validates(llm, schema):
    messages = [{"role": "user", "content": "Give me an example JSON value."}]
    out = llm.create_chat_completion(
        messages, max_tokens=400, temperature=0, response_format={"type": "json_object", "schema": schema}
    )
    choice = out["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    jsonschema.validate(json.loads(choice["message"]["content"]), schema)


def test_openai_json_schema_form_and_refs(llm):
    schema = {
        "$defs": {
            "person": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 12}, "born": {"$ref": "#/$defs/date"}},
                "required": ["name", "born"],
                "additionalProperties": False,
            },
            "date": {"type": "string", "format": "date"},
        },
        "type": "object",
        "properties": {
            "owner": {"$ref": "#/$defs/person"},
            "pets": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        },
        "required": ["owner", "pets"],
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "owner", "schema": schema, "strict": True}}
    out = llm.create_chat_completion(
        [{"role": "user", "content": "A person and their pets as JSON."}],
        max_tokens=300,
        temperature=0,
        response_format=fmt,
    )
    value = json.loads(out["choices"][0]["message"]["content"])
    jsonschema.validate(value, schema)


def test_recursive_refs_make_recursive_rules():
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/node"}]},
                },
                "required": ["value", "next"],
            }
        },
        "$ref": "#/$defs/node",
    }
    grammar = schema_to_gbnf(schema)
    LlamaGrammar.from_string(grammar)
    assert grammar.count("ref--defs-node ::=") == 1


@pytest.mark.parametrize(
    "schema, words",
    [
        ({"type": "string", "pattern": "^a+$"}, "pattern"),
        ({"type": "integer", "minimum": 3}, "minimum"),
        ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}, "not"),
        ({"allOf": [{"type": "string"}]}, "allOf"),
        ({"type": "string", "format": "email"}, "format 'email'"),
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
        ({"$ref": "https://example.com/schema.json"}, "only local"),
        ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, "not defined"),
        ({"type": "array", "minItems": 3, "maxItems": 1}, "maxItems"),
        ({"type": "decimal"}, "unknown type"),
    ],
)
def test_unsupported_schemas_raise_a_clear_error(schema, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        schema_to_gbnf(schema)


def test_tuple_form_items_are_a_fixed_tuple(llm):
    """Draft 4's ``items: [...]`` (as llama.cpp reads it): exactly those values, in that order."""
    grammar = LlamaGrammar.from_string(schema_to_gbnf({"items": [{"type": "integer"}, {"type": "string"}]}))
    out = llm.create_completion("A pair:", grammar=grammar, max_tokens=48, temperature=0)["choices"][0]["text"]
    value = json.loads(out)
    assert isinstance(value, list) and len(value) == 2
    assert isinstance(value[0], int) and isinstance(value[1], str)
