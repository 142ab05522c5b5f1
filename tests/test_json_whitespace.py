"""Whitespace between JSON tokens, in every constraint that writes JSON (a schema, a reply's
response_format, tool calls): what llama.cpp's converter allows (none, one space, or one or two
newlines and at most 20 spaces or tabs), no more, so a model cannot fill its budget with blank
lines."""

from __future__ import annotations

import json

import llguidance
import pytest

from llama_ffi.high import Llama
from llama_ffi.high.constraints import composed, json_schema_grammar
from llama_ffi.high.constraints.tokenizer import for_vocab

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "array", "items": {"type": "integer"}}},
    "required": ["city", "days"],
}
VALUE = {"city": "Paris", "days": [1, 2]}
WRITTEN = [
    json.dumps(VALUE, separators=(",", ":")),
    json.dumps(VALUE),
    json.dumps(VALUE, indent=2),
    json.dumps(VALUE, indent="\t"),
    '{\n\n  "city": "Paris",\n\n  "days": [1, 2]\n}',
    '{"city":' + " " * 1 + '"Paris", "days":\n' + " " * 20 + "[1,2]}",
]
TOO_MUCH = [
    '{\n\n\n"city": "Paris", "days": [1, 2]}',
    '{"city":' + " " * 2 + '"Paris", "days": [1, 2]}',
    '{"city": "Paris", "days":\n' + " " * 21 + "[1, 2]}",
    '{"city": "Paris",\r\n"days": [1, 2]}',
    '{"city": "Paris", "days": [1, 2]\n\n\n}',
]


@pytest.fixture(scope="module")
def vocab(smollm2_path):
    with Llama(smollm2_path, vocab_only=True, progress=False) as llm:
        yield llm.loaded_model.vocab_ptr


def grammars(vocab) -> dict[str, tuple[str, str]]:
    """Each JSON-writing constraint, with how a JSON text is written under it (JSON: the text)."""
    call = '<tool_call>{"name": "forecast", "arguments": JSON}</tool_call>'
    return {
        "json schema": (json_schema_grammar(SCHEMA), "JSON"),
        "response_format": (composed.json_reply(SCHEMA, vocab), "JSON"),
        "tool call": (composed.tool_calls({"forecast": SCHEMA}, vocab, lazy=False, max_calls=1), call),
    }


def accepts(tokenizer, grammar: str, text: str) -> bool:
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    return matcher.consume_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()


def test_json_may_be_compact_or_pretty_printed_but_not_padded_past_llama_cpps_bound(vocab):
    tokenizer = for_vocab(vocab)
    for name, (grammar, form) in grammars(vocab).items():
        for text in WRITTEN:
            assert accepts(tokenizer, grammar, form.replace("JSON", text)), (name, text)
        for text in TOO_MUCH:
            assert not accepts(tokenizer, grammar, form.replace("JSON", text)), (name, text)
