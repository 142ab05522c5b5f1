"""The constraints a request can give, as llguidance grammars: a JSON Schema, a regular expression,
a choice among strings, a Lark grammar. Each is checked here, before any decoding: a constraint
that cannot be enforced is a ``ConstraintError`` naming the problem (a 400 on the server), never a
constraint silently dropped."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import llguidance

from llama_ffi.high.constraints import bounds, rewrite
from llama_ffi.high.errors import RequestTypeError, RequestValueError

# Whitespace between JSON tokens as llama.cpp's converter bounds it (its SPACE_RULE): none (compact,
# the fewest tokens), one space, or one or two newlines and at most 20 spaces or tabs of indent. A
# model cannot spend its tokens on a run of blank lines.
JSON_OPTIONS = {"whitespace_pattern": r"(?: |\n{1,2}[ \t]{0,20})"}


class ConstraintError(RequestValueError):
    """A schema, pattern or grammar that cannot be enforced; the message says why."""


def checked(grammar: str, what: str) -> str:
    """``grammar`` if llguidance compiles it; a ``ConstraintError`` naming ``what`` otherwise."""
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise ConstraintError(f"{what} cannot be enforced: {messages[0] if messages else 'invalid'}")
    return grammar


def parsed_schema(schema: dict | bool | str) -> dict:
    """A JSON Schema as a dict: a dict, ``true`` (anything), or its JSON text."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as error:
            raise ConstraintError(f"the JSON schema is not valid JSON: {error}") from None
    if not isinstance(schema, (dict, bool)):
        raise RequestTypeError(f"a JSON schema must be an object (or true), got {type(schema).__name__}")
    return {} if schema is True else schema


def json_schema_grammar(schema: dict | bool | str, generation: bool = False) -> str:
    """A JSON Schema (a dict, ``true``, or its JSON text) as a llguidance grammar (``enforced``)."""
    return enforced(schema, generation)[1]


def enforceable(schema: dict | bool | str, generation: bool = True) -> dict:
    """The schema as llguidance takes it (``enforced``), to embed in a Lark grammar (``%json``)."""
    return enforced(schema, generation)[0]


def enforced(schema: dict | bool | str, generation: bool = False) -> tuple[dict, str]:
    """(schema, grammar) as llguidance takes them: the schema itself, or where llguidance refuses
    it and an exact rewrite is known (``rewrite``), the equivalent schema; else the refusal
    stands, naming the keyword and where it is. ``generation``: narrowed as llama.cpp narrows
    what a model writes (``bounds``)."""
    schema = parsed_schema(schema)
    try:
        return enforced_as_is(schema, generation)
    except ConstraintError as refused:
        reason = str(refused)
    equivalent, used = rewrite.rewritten(schema)
    if used:
        try:
            return enforced_as_is(equivalent, generation)
        except ConstraintError as still:
            if "Unsatisfiable" in str(still):  # what was refused is gone, and no value is left
                reason = str(still)
    raise ConstraintError(f"{reason}{located(schema, reason)}") from None


def enforced_as_is(schema: dict, generation: bool) -> tuple[dict, str]:
    """(schema, grammar); a ``ConstraintError`` where refused."""
    if generation:
        schema = bounds.narrowed(schema)
    return schema, compiled_schema(schema)


def compiled_schema(schema: dict) -> str:
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
    except ValueError as error:
        raise ConstraintError(f"the JSON schema cannot be enforced: {error}") from None
    return checked(grammar, "the JSON schema")


def located(schema: dict, message: str) -> str:
    """ " (at #/path)" for the first schema holding the keyword or format a refusal names."""
    _, _, keys = message.partition("Unimplemented keys:")
    named = re.findall(r'"([^"]+)"', keys)
    if "oneOf constraints" in message:
        named = ["oneOf"]
    fmt = re.search(r"Unknown format: (\S+)", message)
    for path, node in rewrite.schemas(schema):
        if any(key in node for key in named) or (fmt and node.get("format") == fmt.group(1)):
            return f" (at {path})"
    return ""


def regex_grammar(pattern: str) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise RequestTypeError("a regex must be a non-empty string")
    return checked(llguidance.LLMatcher.grammar_from_regex(pattern), f"the regex {pattern!r}")


def choice_grammar(choices: Sequence[str]) -> str:
    """Exactly one of ``choices`` (vLLM's ``guided_choice``)."""
    if isinstance(choices, str) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise RequestTypeError("choices must be a non-empty list of non-empty strings")
    alternatives = " | ".join(json.dumps(c) for c in dict.fromkeys(choices))
    return checked(llguidance.LLMatcher.grammar_from_lark(f"start: {alternatives}\n"), "the choice")


def lark_grammar(text: str) -> str:
    """A Lark grammar in llguidance's dialect (llama-server's ``%llguidance`` grammars)."""
    if not isinstance(text, str) or not text.strip():
        raise RequestTypeError("a Lark grammar must be a non-empty string")
    text = text.removeprefix("%llguidance {}").lstrip("\n") if text.startswith("%llguidance {}") else text
    return checked(llguidance.LLMatcher.grammar_from_lark(text), "the Lark grammar")
