"""Property names that are JSON Schema keywords: the narrowing for generation and the rewrites walk a
schema by its keywords (``constraints.keywords``), so ``{"properties": {"format": ...}}`` is a
property called format, never the ``format`` keyword (it was a TypeError on 2 % of JSONSchemaBench's
schemas: BFCL's tool schemas, any pydantic model with a field called format or type)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_ffi.high import Llama, LlamaGrammar
from llama_ffi.high.constraints.bounds import narrowed
from llama_ffi.high.constraints.rewrite import rewritten

KEYWORDS = [
    "format", "type", "items", "properties", "required", "minimum", "maximum", "enum", "const", "pattern",
    "additionalProperties", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "$defs",
    "definitions", "prefixItems", "dependencies", "default", "title", "multipleOf", "maxLength",
]  # fmt: skip
LEAVES = [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "string", "format": "date"}]


def objects(names: list[str], leaves: list[dict]) -> dict:
    return {"type": "object", "properties": dict(zip(names, leaves)), "required": list(names)}


@pytest.mark.parametrize("name", KEYWORDS)
def test_a_property_named_like_a_keyword_stays_a_property(name):
    schema = objects([name], [{"type": "string", "format": "date"}])
    out = narrowed(schema)
    assert out["properties"] == {name: {"type": "string", "format": "date"}}  # walked as a map of names
    assert out["additionalProperties"] is False
    LlamaGrammar.from_json_schema(json.dumps(schema))  # compiles (TypeError before)


nested = st.recursive(
    st.sampled_from(LEAVES),
    lambda inner: st.lists(
        st.tuples(st.sampled_from(KEYWORDS), inner), min_size=1, max_size=4, unique_by=lambda p: p[0]
    ).map(lambda pairs: objects([n for n, _ in pairs], [s for _, s in pairs])),
    max_leaves=8,
)


def instances_of(schema: dict) -> st.SearchStrategy:
    """Instances that meet ``schema`` (of the shapes ``nested`` makes), and near misses."""
    if schema.get("type") != "object":
        return {"string": st.text(max_size=6), "integer": st.integers(), "boolean": st.booleans()}[schema["type"]]
    props = schema["properties"]
    return st.fixed_dictionaries({n: instances_of(s) for n, s in props.items()}) | st.fixed_dictionaries(
        {n: st.one_of(st.integers(), st.text(max_size=3)) for n in props}
    )


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rewrites_keep_what_a_keyword_named_schema_accepts(data):
    """The rewritten schema accepts and refuses the same instances as the original (jsonschema is
    the oracle), and the narrowing keeps every instance the model would write compactly."""
    schema = {"type": "object", **data.draw(nested.filter(lambda s: s.get("type") == "object"))}
    equivalent, _ = rewritten(schema)
    narrow = narrowed(schema)
    for _ in range(5):
        instance = data.draw(instances_of(schema))
        valid = jsonschema.Draft202012Validator(schema).is_valid(instance)
        assert jsonschema.Draft202012Validator(equivalent).is_valid(instance) == valid
        if valid:  # narrowing only refuses what the schema leaves open (other properties, huge numbers)
            small = json.loads(json.dumps(instance), parse_int=lambda t: int(t) % 1000)
            assert jsonschema.Draft202012Validator(narrow).is_valid(small) == jsonschema.Draft202012Validator(
                schema
            ).is_valid(small)


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, progress=False) as model:
        yield model


def test_a_model_with_fields_called_format_and_type_answers_in_its_schema(llm):
    schema = objects(["format", "type"], [{"type": "string", "enum": ["png", "jpeg"]}, {"type": "string"}])
    schema["properties"]["type"]["maxLength"] = 12
    reply = llm.create_chat_completion(
        [{"role": "user", "content": "Describe an image file as JSON."}],
        response_format={"type": "json_object", "schema": schema},
        max_tokens=48,
        temperature=0,
    )
    jsonschema.validate(json.loads(reply["choices"][0]["message"]["content"]), schema)
