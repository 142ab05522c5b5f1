"""JSON Schema walked by its keywords: which keyword's value is a schema, a list of schemas or a map
of names to schemas, and which holds JSON values or annotations. The narrowing (``bounds``) and the
rewrites (``rewrite``) walk schemas through it, so a property named like a keyword (``format``,
``type``, ``items``) is never read as one."""

from __future__ import annotations

from collections.abc import Callable, Iterator

SCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas")
SCHEMA_LISTS = ("prefixItems", "anyOf", "allOf", "oneOf")
SCHEMA_VALUES = (
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)


def children(key: str, value, visit: Callable):
    """Keyword ``key``'s ``value`` with ``visit`` applied to every schema directly in it (draft 4's
    ``dependencies`` maps names to schemas or to lists of names); a value that holds no schema
    (``enum``, ``required``, an annotation, an unknown keyword) is returned as it is."""
    if key in SCHEMA_MAPS and isinstance(value, dict):
        return {name: visit(sub) for name, sub in value.items()}
    if key == "dependencies" and isinstance(value, dict):
        return {name: sub if isinstance(sub, list) else visit(sub) for name, sub in value.items()}
    if (key in SCHEMA_LISTS or key == "items") and isinstance(value, list):
        return [visit(sub) for sub in value]
    if key in SCHEMA_VALUES or key == "items":
        return visit(value)
    return value


def subschemas(key: str, value) -> Iterator[tuple[str, object]]:
    """(JSON pointer suffix, schema) of every schema directly in keyword ``key``'s ``value``."""
    if (key in SCHEMA_MAPS or key == "dependencies") and isinstance(value, dict):
        for name, sub in value.items():
            if not isinstance(sub, list):
                yield f"/{key}/{name}", sub
    elif (key in SCHEMA_LISTS or key == "items") and isinstance(value, list):
        for i, sub in enumerate(value):
            yield f"/{key}/{i}", sub
    elif key in SCHEMA_VALUES or key == "items":
        yield f"/{key}", value
