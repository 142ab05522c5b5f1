"""What a model is allowed to write beyond what a schema names, narrowed for generation as
llama.cpp's converter (and llama-cpp-python, which uses it) narrows it: a number with no bound of
its own gets at most 16 digits before the point (±(10**16 - 1)) and, where the schema sets no
``multipleOf``, at most 9 after it and no exponent (``multipleOf`` 1e-9: llguidance's
multiples of smaller steps refuse every number at 1.9.1); an object that names its properties
but says nothing of others gets no others, and a tuple no items past its own; a time gets at
most 9 digits of a second (the format's own expression has no bound). A small model otherwise
writes digits, or nests objects, until it runs out of tokens. Checking instances (MaskBench)
uses the schema as written."""

from __future__ import annotations

from llama_ffi.high.constraints import keywords

LIMIT = 10**16 - 1
STEP = 1e-9
# the longest time and date-time with 9 digits of a second and an offset: "23:59:60.123456789+00:00"
FORMAT_LENGTHS = {"time": 24, "date-time": 35}
COMBINATORS = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies"})
OTHER_PROPERTIES = ("additionalProperties", "patternProperties", "unevaluatedProperties")


def narrowed(node, closable: bool = True):
    """A copy of the schema ``node`` narrowed for generation. ``closable``: no schema beside it
    (its parent's properties) adds properties that closing it would refuse."""
    if not isinstance(node, dict):
        return node  # true, false
    names = node.get("properties")
    beside = closable and not isinstance(names, dict)  # what a combinator's branches may close

    def within(key: str):
        return (lambda sub: narrowed(sub, beside)) if key in COMBINATORS else narrowed

    out = {key: keywords.children(key, value, within(key)) for key, value in node.items()}
    kinds = node.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "integer" in kinds or "number" in kinds:
        if "minimum" not in node and "exclusiveMinimum" not in node:
            out["minimum"] = -LIMIT
        if "maximum" not in node and "exclusiveMaximum" not in node:
            out["maximum"] = LIMIT
        if "number" in kinds and "multipleOf" not in node:
            out["multipleOf"] = STEP
    longest = FORMAT_LENGTHS.get(node.get("format")) if isinstance(node.get("format"), str) else None
    if longest is not None and "maxLength" not in node:
        out["maxLength"] = longest
    if isinstance(node.get("items"), list) and "additionalItems" not in node:  # draft 4's tuple
        out["additionalItems"] = False
    if isinstance(node.get("prefixItems"), list) and "items" not in node:
        out["items"] = False
    required = node.get("required", [])
    if (
        closable
        and isinstance(names, dict)
        and not any(key in node for key in (*OTHER_PROPERTIES, *COMBINATORS, "$ref"))
        and isinstance(required, list)
        and all(name in names for name in required)
    ):
        out["additionalProperties"] = False
    return out
