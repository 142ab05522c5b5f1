"""llguidance writes an object's properties in the order its schema lists them (its documented
departure from JSON Schema, where any order is valid). ``in_schema_order`` puts a JSON value's keys
in that order: the form of a valid value the constraint accepts (to check existing JSON against
it, or to show a model an example it may write)."""

from __future__ import annotations

from llama_ffi.high.constraints import rewrite


def in_schema_order(value, schema, root=None, depth: int = 0):
    """``value`` with every object's keys in the order the schema (its branches and local
    references followed) lists them; other keys after them, as they were."""
    root = schema if root is None else root
    if depth > 32:
        return value
    schemas = branches(schema, root, depth)
    if isinstance(value, dict):
        order: dict[str, list] = {}
        for branch in schemas:
            for name, sub in (branch.get("properties") or {}).items():
                order.setdefault(name, []).append(sub)
        keys = [k for k in order if k in value] + [k for k in value if k not in order]
        return {k: in_schema_order(value[k], {"allOf": order.get(k, [])}, root, depth + 1) for k in keys}
    if isinstance(value, list):
        items = [b["items"] for b in schemas if isinstance(b.get("items"), dict)]
        tuples = [b["prefixItems"] for b in schemas if isinstance(b.get("prefixItems"), list)]
        ordered = []
        for i, item in enumerate(value):
            at = [t[i] for t in tuples if i < len(t)] or items
            ordered.append(in_schema_order(item, {"allOf": at}, root, depth + 1))
        return ordered
    return value


def branches(schema, root, depth: int) -> list[dict]:
    """The schema and every schema it combines or references, flattened."""
    if not isinstance(schema, dict) or depth > 32:
        return []
    found = [schema]
    ref = schema.get("$ref")
    if isinstance(ref, str) and rewrite.resolves(root, ref):
        found += branches(rewrite.pointed(root, ref), root, depth + 1)
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            found += branches(sub, root, depth + 1)
    return found
