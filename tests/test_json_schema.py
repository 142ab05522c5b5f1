"""JSON Schema replies: what chat's ``response_format`` generates validates (``jsonschema`` is the
oracle), over random schemas and OpenAI's form; llama.cpp's converter corpus, read from the pinned
tree, is shared with tests/test_constraints.py."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_ffi.high import Llama, LlamaGrammar


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
    except jsonschema.SchemaError:  # tuple-form "items": draft 7's spelling, which llama.cpp reads
        validator = jsonschema.Draft7Validator
    try:
        jsonschema.validate(json.loads(text), schema, cls=validator)
    except (json.JSONDecodeError, jsonschema.ValidationError) as error:
        pytest.fail(f"{name}: {text!r} does not validate: {error}")


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


def test_tuple_form_items_are_a_fixed_tuple(llm):
    """Draft 4's ``items: [...]`` (as llama.cpp reads it): exactly those values, in that order."""
    grammar = LlamaGrammar.from_json_schema({"type": "array", "items": [{"type": "integer"}, {"type": "string"}]})
    out = llm.create_completion("A pair:", grammar=grammar, max_tokens=48, temperature=0)["choices"][0]["text"]
    value = json.loads(out)
    assert isinstance(value, list) and len(value) == 2
    assert isinstance(value[0], int) and isinstance(value[1], str)
