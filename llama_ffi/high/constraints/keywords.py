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


# Keywords that say something about a schema without constraining any value.
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "example",
        "$schema",
        "$id",
        "id",
        "$comment",
        "$anchor",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$defs",
        "definitions",
        "contentMediaType",
        "contentEncoding",
        "discriminator",
        "nullable",
        "markdownDescription",
        "errorMessage",
    }
)
# Of those, the ones that name or hold schemas ("$id" moves the base of the references inside,
# "definitions" holds their targets): a schema beside a "$ref" keeps them.
NAMING = frozenset({"$id", "id", "$anchor", "$defs", "definitions"})


def is_annotation(key: str) -> bool:
    return key in ANNOTATIONS or key.startswith("x-")


def holds(key: str, value) -> str | None:
    """What keyword ``key``'s ``value`` holds: "map" (names to schemas; draft 4's ``dependencies``
    may map a name to a list of names instead), "list" (schemas), "schema", or None (JSON values,
    ``required``, an annotation, an unknown keyword)."""
    if (key in SCHEMA_MAPS or key == "dependencies") and isinstance(value, dict):
        return "map"
    if (key in SCHEMA_LISTS or key == "items") and isinstance(value, list):
        return "list"
    if key in SCHEMA_VALUES or key == "items":
        return "schema"
    return None


def children(key: str, value, visit: Callable):
    """Keyword ``key``'s ``value`` with ``visit`` applied to every schema directly in it."""
    held = holds(key, value)
    if held == "map":
        return {name: sub if isinstance(sub, list) else visit(sub) for name, sub in value.items()}
    if held == "list":
        return [visit(sub) for sub in value]
    return visit(value) if held == "schema" else value


def subschemas(key: str, value) -> Iterator[tuple[str, object]]:
    """(JSON pointer suffix, schema) of every schema directly in keyword ``key``'s ``value``."""
    held = holds(key, value)
    if held == "map":
        yield from ((f"/{key}/{name}", sub) for name, sub in value.items() if not isinstance(sub, list))
    elif held == "list":
        yield from ((f"/{key}/{i}", sub) for i, sub in enumerate(value))
    elif held == "schema":
        yield f"/{key}", value
