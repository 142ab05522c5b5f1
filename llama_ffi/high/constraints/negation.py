"""``not`` of a JSON Schema, written with keywords llguidance takes (it refuses ``not``).

A schema is the conjunction of its keywords, so ``not`` of it is the ``anyOf`` of the negations of
its keywords (those that act together, like ``properties`` and ``additionalProperties``, negated as
one). A keyword only constrains values of its own type, so its negation is that type with the
opposite bound: ``not {"minLength": 3}`` is a string of at most 2 characters, not any non-string.
``None`` where no exact rewrite is known (a ``pattern``, a ``format``, ``oneOf``...): the caller
keeps the ``not`` and llguidance refuses the schema by name."""

from __future__ import annotations

import math
import string
from collections.abc import Callable

from llama_ffi.high.constraints.keywords import is_annotation

TYPES = ("null", "boolean", "object", "array", "string", "number")

Resolve = Callable[[str], "dict | bool | None"]

# The most nested negations followed through $ref (a recursive schema must not loop).
MAX_DEPTH = 8


def constraining(schema: dict) -> dict:
    """``schema`` without its annotations."""
    return {k: v for k, v in schema.items() if not is_annotation(k)}


def negate(schema, resolve: Resolve, depth: int = 0):
    """A schema accepting exactly the JSON values ``schema`` rejects, or None."""
    if schema is True:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return None
    schema = constraining(schema)
    if not schema:
        return False
    negations = []
    for group in groups(schema):
        negation = negate_group(group, resolve, depth)
        if negation is None:
            return None
        negations.append(negation)
    return negations[0] if len(negations) == 1 else {"anyOf": negations}


def groups(schema: dict) -> list[dict]:
    """The schema's keywords, split into the parts that constrain independently."""
    together = (
        ("properties", "additionalProperties", "patternProperties"),
        ("items", "prefixItems", "additionalItems"),
    )
    parts, seen = [], set()
    for keys in together:
        group = {k: schema[k] for k in keys if k in schema}
        if group:
            parts.append(group)
            seen.update(group)
    if "if" in schema or "then" in schema or "else" in schema:
        parts.append({k: schema[k] for k in ("if", "then", "else") if k in schema})
        seen.update(("if", "then", "else"))
    parts += [{k: v} for k, v in schema.items() if k not in seen]
    return parts


def negate_group(group: dict, resolve: Resolve, depth: int):
    if group.keys() & {"properties", "additionalProperties", "patternProperties"}:
        return not_properties(group, resolve, depth)
    if group.keys() & {"items", "prefixItems", "additionalItems", "if", "then", "else"}:
        return None
    ((key, value),) = group.items()
    if key == "type":
        return not_type(value)
    if key == "enum" and isinstance(value, list):
        return other_values(value)
    if key == "const":
        return other_values([value])
    if key == "required" and isinstance(value, list):
        missing = [{"properties": {name: False}} for name in dict.fromkeys(value)]
        if not missing:
            return False
        return {"type": "object", **(missing[0] if len(missing) == 1 else {"anyOf": missing})}
    if key == "not":
        return value
    if key == "$ref" and isinstance(value, str):
        target = resolve(value)
        return None if target is None else negate(target, resolve, depth + 1)
    if key in ("anyOf", "allOf") and isinstance(value, list) and value:
        negations = [negate(branch, resolve, depth + 1) for branch in value]
        if any(n is None for n in negations):
            return None
        return {"allOf" if key == "anyOf" else "anyOf": negations}
    if key in ("oneOf",) and isinstance(value, list) and len(value) == 1:
        return negate(value[0], resolve, depth + 1)
    return not_bound(key, value)


def not_type(value):
    named = [value] if isinstance(value, str) else value
    if not isinstance(named, list) or not all(t in (*TYPES, "integer") for t in named):
        return None
    if "integer" in named and "number" not in named:
        return None  # "a number that is not an integer" has no keyword
    left = [t for t in TYPES if t not in named]
    return {"type": left} if left else False


def not_bound(key: str, value):
    """The opposite bound, within the bound's type; None for keywords with no exact opposite."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number:
        return None
    opposite_number = {
        "minimum": "exclusiveMaximum",
        "maximum": "exclusiveMinimum",
        "exclusiveMinimum": "maximum",
        "exclusiveMaximum": "minimum",
    }
    if key in opposite_number:
        return {"type": "number", opposite_number[key]: value}
    counts = {
        "minLength": ("string", "maxLength"),
        "maxLength": ("string", "minLength"),
        "minItems": ("array", "maxItems"),
        "maxItems": ("array", "minItems"),
    }
    if key not in counts or value != int(value) or value < 0:
        return None
    kind, opposite = counts[key]
    if opposite.startswith("max"):
        return False if value == 0 else {"type": kind, opposite: int(value) - 1}
    return {"type": kind, opposite: int(value) + 1}


def not_properties(group: dict, resolve: Resolve, depth: int):
    """``not`` of ``properties`` alone: an object with some listed property not as described."""
    if set(group) != {"properties"} or not isinstance(group["properties"], dict):
        return None
    cases = []
    for name, schema in group["properties"].items():
        negation = negate(schema, resolve, depth + 1)
        if negation is None:
            return None
        if negation is not False:
            cases.append({"type": "object", "required": [name], "properties": {name: negation}})
    if not cases:
        return False
    return cases[0] if len(cases) == 1 else {"anyOf": cases}


def other_values(values: list):
    """Every JSON value but ``values``: whole types where none is listed, the rest of a type where
    some are (strings by a pattern, numbers by open intervals between the listed ones)."""
    if any(isinstance(v, (dict, list)) for v in values):
        return None
    strings = sorted({v for v in values if isinstance(v, str)})
    numbers = sorted({float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)})
    booleans = [b for b in (True, False) if not any(v is b for v in values)]
    cases: list = [{"type": ["object", "array"]}]
    if not any(v is None for v in values):
        cases.append({"type": "null"})
    if len(booleans) == 2:
        cases.append({"type": "boolean"})
    elif booleans:
        cases.append({"const": booleans[0]})
    cases.append({"type": "string", "pattern": other_strings(strings)} if strings else {"type": "string"})
    if not numbers:
        cases.append({"type": "number"})
    else:
        bounds = [None, *numbers, None]
        for low, high in zip(bounds, bounds[1:]):
            interval = {"type": "number"}
            if low is not None:
                interval["exclusiveMinimum"] = low
            if high is not None:
                interval["exclusiveMaximum"] = high
            cases.append(interval)
    return {"anyOf": cases}


def other_strings(words: list[str]) -> str:
    """An anchored regex matching every string except ``words``."""
    return "^(?:" + _other_strings(set(words)) + ")$"


def _other_strings(words: set[str]) -> str:
    # Strings that leave the word set at their first character, or stay in it and leave it later.
    anything = r"[\s\S]"
    firsts = sorted({w[0] for w in words if w})
    if firsts:
        alternatives = ["[^" + "".join(map(_escaped, firsts)) + "]" + anything + "*"]
    else:
        alternatives = [anything + "+"]
    for first in firsts:
        rest = {w[1:] for w in words if w and w[0] == first}
        alternatives.append(_escaped(first) + "(?:" + _other_strings(rest) + ")")
    body = "|".join(alternatives)
    return body if "" in words else "(?:" + body + ")?"


def _escaped(char: str) -> str:
    # Escaped ASCII punctuation reads the same in llguidance's (Rust) and Python's regex syntax;
    # but "\<" and "\>" are word boundaries in Rust, and need no escape in either.
    return "\\" + char if char in string.punctuation and char not in "<>" else char
