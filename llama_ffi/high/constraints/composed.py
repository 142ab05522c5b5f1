"""Constraints composed for chat replies, as llguidance Lark grammars over one vocabulary: tool calls
in a family's form (``CallForm``: Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
Mistral's ``[TOOL_CALLS][{...}]`` and ``[TOOL_CALLS]name[ARGS]{...}``), forced (every reply is calls)
or lazy (free text until the model opens a call, then the call follows its function's schema:
llama.cpp's lazy grammar), and any reply behind a reasoning block (the
constraint starts once ``</think>`` closes it). A tag the vocabulary holds as one special token is
written as that token (``<[id]>``): its text alone would never be sampled as it."""

from __future__ import annotations

import json
from dataclasses import dataclass

import llguidance

from llama_ffi import ffi, lib
from llama_ffi.high.constraints.grammars import JSON_OPTIONS, checked, enforceable

FREE = r"/(.|\n)*/"


@dataclass(frozen=True)
class Reasoning:
    """A reasoning block before the reply: its tags, and whether the prompt already opened it."""

    start: str = "<think>"
    end: str = "</think>"
    started: bool = False


@dataclass(frozen=True)
class CallForm:
    """How a model family writes a tool call: ``opener``, then the call, then ``closer``. ``shape``:
    "object" (one ``{"name", "arguments"}``), "array" (a JSON array of them, each with an optional
    9-character ``id``: Mistral Nemo's) or "args" (the name, ``[ARGS]``, the arguments)."""

    opener: str
    closer: str = ""
    shape: str = "object"


HERMES = CallForm("<tool_call>", "</tool_call>")
MISTRAL_ARRAY = CallForm("[TOOL_CALLS]", shape="array")
MISTRAL_ARGS = CallForm("[TOOL_CALLS]", shape="args")


def literal(text: str, vocab) -> str:
    """``text`` as a Lark terminal: ``<[id]>`` where the vocabulary holds it as one special token."""
    token = _single_token(text, vocab)
    if token is not None:
        attr = lib.llama_vocab_get_attr(vocab, token)
        tag_like = text.startswith("<") and text.endswith(">")
        if attr & lib.LLAMA_TOKEN_ATTR_CONTROL or (attr & lib.LLAMA_TOKEN_ATTR_USER_DEFINED and tag_like):
            return f"<[{token}]>"
    return json.dumps(text)


def _single_token(text: str, vocab) -> int | None:
    raw = text.encode()
    ids = ffi.new("llama_token[]", 4)
    n = lib.llama_tokenize(vocab, raw, len(raw), ids, 4, False, True)
    return ids[0] if n == 1 else None


def json_part(schema: dict) -> str:
    """``%json`` of the schema llguidance enforces for it, with the JSON options every reply uses."""
    return "%json " + json.dumps({**enforceable(schema), "x-guidance": JSON_OPTIONS}, ensure_ascii=False)


def call_schema(functions: dict[str, dict]) -> dict:
    """One call of any of ``functions`` (name -> parameter schema): name first, then arguments."""
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for name, parameters in functions.items()
        ]
    }


def tool_calls(
    functions: dict[str, dict],
    vocab,
    *,
    lazy: bool,
    max_calls: int,
    form: CallForm = HERMES,
    reasoning: Reasoning | None = None,
) -> str:
    """Calls of ``functions`` (name -> parameter schema) in ``form``. ``lazy``: free text, with
    calls wherever the model opens one (each call checked; a reasoning block is free text too);
    else 1..``max_calls`` calls and nothing else, after the reasoning block if any."""
    opened = literal(form.opener, vocab)
    closed = f" {literal(form.closer, vocab)}" if form.closer else ""
    rules = [f"call_json: {_call_body(functions, form, max_calls)}"]
    if lazy:
        rules += [f"text[lazy]: {FREE} {opened}", f"text_end: {FREE}"]
        if form.closer:  # text may follow a closed call, and open another
            body = "(text call)* text_end"
            rules.append(f"call: call_json{closed}")
        else:  # nothing closes the calls: they end the reply, as in the family's own format
            more = f" ({opened} call_json){{0,{max_calls - 1}}}" if form.shape == "args" and max_calls > 1 else ""
            body = f"text_end | text call_json{more}"
        reasoning = None
    else:
        body = "call" + (f' ("\\n" call){{0,{max_calls - 1}}}' if max_calls > 1 and form.shape != "array" else "")
        rules.append(f"call: {opened} call_json{closed}")
    return _grammar(body, rules, vocab, reasoning)


def _call_body(functions: dict[str, dict], form: CallForm, max_calls: int) -> str:
    """What follows the opener: one call, or an array of calls, as ``form`` writes them."""
    if form.shape == "args":
        return " | ".join(f'{json.dumps(name)} "[ARGS]" {json_part(schema)}' for name, schema in functions.items())
    if form.shape == "array":
        nemo_id = {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}
        calls = [{**c, "properties": {**c["properties"], "id": nemo_id}} for c in call_schema(functions)["anyOf"]]
        return json_part({"type": "array", "items": {"anyOf": calls}, "minItems": 1, "maxItems": max_calls})
    return json_part(call_schema(functions))


def json_reply(schema: dict, vocab, reasoning: Reasoning | None = None) -> str:
    """A reply that is JSON valid against ``schema`` (after the reasoning block, if any)."""
    return _grammar("reply_json", [f"reply_json: {json_part(schema)}"], vocab, reasoning)


def _grammar(body: str, rules: list[str], vocab, reasoning: Reasoning | None) -> str:
    if reasoning is None:
        start = f"start: {body}"
    else:
        start_tag, end_tag = literal(reasoning.start, vocab), literal(reasoning.end, vocab)
        if reasoning.started:  # the template opened the block: the reply begins inside it
            start = f"start: thought gap {body}"
            rules += [f"thought[lazy]: {FREE} {end_tag}"]
        else:
            start = f"start: (thought gap)? {body}"
            rules += [f"thought[lazy]: {start_tag} {FREE} {end_tag}"]
        rules += [r"gap: /[ \t\r\n]{0,4}/"]
    return checked(llguidance_text(start, rules), "the reply's constraint")


def llguidance_text(start: str, rules: list[str]) -> str:
    return llguidance.LLMatcher.grammar_from_lark("\n".join([start, *rules]) + "\n")
