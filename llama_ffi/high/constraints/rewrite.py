"""Exact rewrites of the JSON Schema keywords llguidance refuses into ones it takes.

``rewritten(schema)`` returns an equivalent schema (the same JSON values valid) where it can:

- ``not`` through ``negation.negate``;
- ``oneOf`` as ``anyOf`` where its branches provably exclude each other (different types, or a
  required property with different constant values), else each branch ``and not`` the others;
- ``dependencies`` / ``dependentRequired`` / ``dependentSchemas``: "the property is absent, or
  present with what it needs";
- ``if``/``then``/``else``: "``if`` and ``then``, or ``not if`` and ``else``";
- ``uniqueItems`` over a few enumerated values: the distinct sequences themselves;
- ``minProperties``/``maxProperties`` of a closed object: the sets of optional properties present;
- ``pattern`` opening with look-aheads (``^(?=X)Y``): the patterns ``^X`` and ``^Y`` together;
- ``prefixItems`` given one schema instead of a list (no draft's spelling): read as ``items``, as
  llama.cpp's converter reads it;
- annotations beside a ``$ref`` dropped;
- ``format``: draft 3's names for today's formats renamed, the standard formats llguidance does not
  know as their pattern (``formats``), and formats no JSON Schema draft defines dropped (an unknown
  format is an annotation).

Whatever has no exact rewrite stays, so llguidance refuses it by name: nothing that would let an
invalid value through is dropped. ``used`` says which rewrites a schema needed."""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
from urllib.parse import unquote

from llama_ffi.high.constraints import formats, keywords
from llama_ffi.high.constraints.negation import TYPES, constraining, negate

# Distinct sequences of at most this many enumerated values become their list.
MAX_UNIQUE_VALUES = 5
# oneOf branches rewritten as "this one and not the others".
MAX_NEGATED_BRANCHES = 4
# Sets of present properties enumerated for min/maxProperties.
MAX_PROPERTY_SETS = 64


def rewritten(schema: dict) -> tuple[dict, set[str]]:
    """The equivalent schema and the rewrites used (empty: ``schema`` itself)."""
    rewrite = Rewrite(schema)
    result = rewrite.schema(schema)
    if not rewrite.used or not all(resolves(result, ref) for _, ref in refs(result)):
        return schema, set()
    return result, rewrite.used


class Rewrite:
    def __init__(self, root: dict) -> None:
        self.root = root
        self.used: set[str] = set()
        self._targets: dict[str, object] = {}
        self._resolving: set[str] = set()

    def resolve(self, ref: str):
        """The rewritten schema a local ``$ref`` names; None for others and for a ref being
        resolved (a recursive schema)."""
        if ref in self._targets:
            return self._targets[ref]
        if ref in self._resolving or not resolves(self.root, ref):
            return None
        self._resolving.add(ref)
        try:
            target = self.schema(pointed(self.root, ref))
        finally:
            self._resolving.discard(ref)
        self._targets[ref] = target
        return target

    def schema(self, node):
        if not isinstance(node, dict):
            return node
        out = {key: keywords.children(key, value, self.schema) for key, value in node.items()}
        rules = (self.ref_siblings, self.format, self.pattern, self.tuple_items, self.dependencies, self.conditional)
        for rule in (*rules, self.one_of, self.negation, self.unique, self.property_count):
            rule(out)
        if list(out) == ["allOf"] and len(out["allOf"]) == 1:
            return out["allOf"][0]
        return out

    def ref_siblings(self, out: dict) -> None:
        """Annotations beside a ``$ref`` dropped (llguidance refuses any sibling of a recursive one)."""
        if "$ref" not in out or len(out) == 1:
            return
        if all(key == "$ref" or (keywords.is_annotation(key) and key not in keywords.NAMING) for key in out):
            for key in [key for key in out if key != "$ref"]:
                del out[key]
            self.used.add("annotations beside $ref")

    def format(self, out: dict) -> None:
        name = out.get("format")
        if not isinstance(name, str) or name in formats.ENFORCED:
            return
        if name in formats.DRAFT3_NAMES:
            if formats.DRAFT3_NAMES[name] is None:
                del out["format"]
            else:
                out["format"] = formats.DRAFT3_NAMES[name]
        else:
            del out["format"]
            if name in formats.PATTERNS:
                also(out, {"pattern": formats.pattern(name)})
                if name in formats.PARTIAL:
                    noted_partly_enforced(name)
        self.used.add("format")

    def pattern(self, out: dict) -> None:
        parts = lookaheads(out.get("pattern"))
        if parts is None:
            return
        del out["pattern"]
        for part in parts:
            also(out, {"pattern": part})
        self.used.add("pattern look-ahead")

    def tuple_items(self, out: dict) -> None:
        if not isinstance(out.get("prefixItems"), dict):
            return
        single = out.pop("prefixItems")
        out.setdefault("items", single)
        self.used.add("prefixItems as items")

    def dependencies(self, out: dict) -> None:
        for key in ("dependencies", "dependentRequired", "dependentSchemas"):
            needs = out.get(key)
            if not isinstance(needs, dict):
                continue
            del out[key]
            for name, need in needs.items():
                if isinstance(need, list):
                    present = {"required": [name, *need]}
                else:
                    present = {"allOf": [{"required": [name]}, need]}
                also(out, {"anyOf": [{"properties": {name: False}}, present]})
            self.used.add("dependencies")

    def conditional(self, out: dict) -> None:
        if "if" not in out:
            if "then" in out or "else" in out:  # without "if" they constrain nothing
                out.pop("then", None), out.pop("else", None)
                self.used.add("if/then/else")
            return
        otherwise = negate(out["if"], self.resolve)
        if otherwise is None:
            return
        condition, then, other = out.pop("if"), out.pop("then", True), out.pop("else", True)
        also(out, {"anyOf": [{"allOf": [condition, then]}, {"allOf": [otherwise, other]}]})
        self.used.add("if/then/else")

    def one_of(self, out: dict) -> None:
        branches = out.get("oneOf")
        if not isinstance(branches, list) or not branches:
            return
        domain = types_of(out, self.resolve, with_one_of=False)
        clash = {
            (i, j)
            for i, j in itertools.permutations(range(len(branches)), 2)
            if not disjoint(branches[i], branches[j], domain, self.resolve)
        }
        if clash and len(branches) > MAX_NEGATED_BRANCHES:
            return
        cases = []
        for i, branch in enumerate(branches):
            others = [negate(branches[j], self.resolve) for j in range(len(branches)) if (i, j) in clash]
            if any(other is None for other in others):
                return
            cases.append({"allOf": [branch, *others]} if others else branch)
        del out["oneOf"]
        also(out, {"anyOf": cases})
        self.used.add("oneOf" if clash else "oneOf (disjoint)")

    def negation(self, out: dict) -> None:
        if "not" not in out:
            return
        negation = negate(out["not"], self.resolve)
        if negation is None:
            return
        del out["not"]
        also(out, negation)
        self.used.add("not")

    def unique(self, out: dict) -> None:
        if "uniqueItems" not in out:
            return
        most = out.get("maxItems")
        if out["uniqueItems"] is False or (isinstance(most, int) and most <= 1):
            del out["uniqueItems"]
            self.used.add("uniqueItems")
            return
        values = enumerated(out.get("items"), self.resolve)
        if out["uniqueItems"] is not True or "prefixItems" in out or values is None or len(values) > MAX_UNIQUE_VALUES:
            return
        least = out.get("minItems", 0)
        most = min(most if isinstance(most, int) else len(values), len(values))
        if not isinstance(least, int):
            return
        sequences = [list(p) for n in range(least, most + 1) for p in itertools.permutations(values, n)]
        del out["uniqueItems"]
        also(out, {"enum": sequences} if sequences else False)
        self.used.add("uniqueItems")

    def property_count(self, out: dict) -> None:
        """``minProperties``/``maxProperties`` of a closed object (no property but those listed):
        which of its optional properties are present, enumerated."""
        if "minProperties" not in out and "maxProperties" not in out:
            return
        sets = present_sets(out)
        if sets is None:
            return
        out.pop("minProperties", None), out.pop("maxProperties", None)
        if sets != [True]:
            also(out, {"anyOf": sets} if sets else False)
        self.used.add("min/maxProperties")


def present_sets(schema: dict) -> list | None:
    """The alternatives of which optional properties an object of ``schema`` holds, meeting its
    ``minProperties``/``maxProperties`` (``[True]``: any; ``[]``: none); None where they cannot be
    listed: an open object, a bound not an integer, or too many sets."""
    names, required = schema.get("properties"), schema.get("required", [])
    least, most = schema.get("minProperties", 0), schema.get("maxProperties")
    closed = schema.get("additionalProperties") is False and "patternProperties" not in schema
    if schema.get("type") != "object" or not closed or not isinstance(names, dict) or not isinstance(required, list):
        return None
    if not isinstance(least, int) or not isinstance(most, (int, type(None))) or not set(required) <= names.keys():
        return None
    optional = [name for name in names if name not in required]
    low = max(least - len(set(required)), 0)
    high = len(optional) if most is None else min(most - len(set(required)), len(optional))
    if high < low:
        return []
    if low == 0 and high == len(optional):
        return [True]
    if high == len(optional):  # at least ``low`` of them: the sets of ``low`` that must be there
        chosen = list(itertools.combinations(optional, low))
        return None if len(chosen) > MAX_PROPERTY_SETS else [{"required": list(c)} for c in chosen]
    counts = range(low, high + 1)
    if sum(math.comb(len(optional), n) for n in counts) > MAX_PROPERTY_SETS:
        return None
    return [
        {"required": list(c), "properties": {name: False for name in optional if name not in c}}
        for n in counts
        for c in itertools.combinations(optional, n)
    ]


@functools.cache
def noted_partly_enforced(name: str) -> None:
    """Say once per process what of format ``name`` its pattern leaves unchecked."""
    logging.getLogger("llama_ffi").warning(
        "format %r is enforced as a regular language; not checked: %s", name, formats.PARTIAL[name]
    )


def lookaheads(pattern) -> list[str] | None:
    """``^(?=X)(?=Y)Z`` as the patterns ``^(?:X)``, ``^(?:Y)`` and ``^Z``; None for any other."""
    if not isinstance(pattern, str) or not pattern.startswith("^(?="):
        return None
    parts, rest = [], pattern[1:]
    while rest.startswith("(?="):
        end = closing(rest)
        if end is None:
            return None
        parts.append("^(?:" + rest[3:end] + ")")
        rest = rest[end + 1 :]
    if "(?=" in rest or "(?!" in rest or "(?<" in rest:
        return None
    return [*parts, "^" + rest]


def closing(text: str) -> int | None:
    """Where the group opening ``text`` closes (escapes and character classes skipped)."""
    depth, i, in_class = 0, 0, False
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if text[i + 1 : i + 2] == "]":
                i += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def also(out: dict, schema) -> None:
    """Add ``schema`` to what ``out`` requires."""
    out.setdefault("allOf", []).append(schema)


def type_of(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", dict: "object", list: "array"}[type(value)]


def types_of(schema, resolve, with_one_of: bool = True, depth: int = 0) -> set[str]:
    """The JSON types a schema can accept at most (``integer`` counted as ``number``)."""
    if schema is False:
        return set()
    if not isinstance(schema, dict) or depth > 8:
        return set(TYPES)
    kinds = set(TYPES)
    named = schema.get("type")
    if isinstance(named, (str, list)):
        kinds &= {"number" if t == "integer" else t for t in ([named] if isinstance(named, str) else named)}
    if "const" in schema:
        kinds &= {type_of(schema["const"])}
    if isinstance(schema.get("enum"), list):
        kinds &= {type_of(v) for v in schema["enum"]}
    if isinstance(schema.get("$ref"), str):
        kinds &= types_of(resolve(schema["$ref"]), resolve, True, depth + 1)
    for key in ("anyOf", "oneOf") if with_one_of else ("anyOf",):
        if isinstance(schema.get(key), list):
            kinds &= set().union(*(types_of(b, resolve, True, depth + 1) for b in schema[key]))
    for branch in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
        kinds &= types_of(branch, resolve, True, depth + 1)
    return kinds


def fixed(schema, resolve) -> dict[str, set[str]]:
    """Required properties whose values are enumerated: name → the values (as JSON text)."""
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and len(constraining(schema)) == 1:
        schema = resolve(schema["$ref"])
    if not isinstance(schema, dict):
        return {}
    found: dict[str, set[str]] = {}
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    for name in schema.get("required") or []:
        values = enumerated(properties.get(name), resolve)
        if values is not None:
            found[name] = {json.dumps(v, sort_keys=True) for v in values}
    for branch in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
        for name, values in fixed(branch, resolve).items():
            found[name] = found[name] & values if name in found else values
    return found


def disjoint(a, b, domain: set[str], resolve) -> bool:
    """Whether no value of the types in ``domain`` is valid against both schemas (False: unknown)."""
    shared = types_of(a, resolve) & types_of(b, resolve) & domain
    if not shared:
        return True
    if shared != {"object"}:
        return False
    values_a, values_b = fixed(a, resolve), fixed(b, resolve)
    return any(not (values_a[name] & values_b[name]) for name in values_a.keys() & values_b.keys())


def enumerated(schema, resolve) -> list | None:
    """The values a schema allows when it only lists them (``enum``, ``const``, a boolean or null type)."""
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and len(constraining(schema)) == 1:
        schema = resolve(schema["$ref"])
    if not isinstance(schema, dict):
        return None
    schema = constraining(schema)
    kinds = types_of({"type": schema["type"]}, resolve) if "type" in schema else set(TYPES)
    if set(schema) - {"type", "enum", "const"}:
        return None
    if "const" in schema:
        values = [schema["const"]]
    elif isinstance(schema.get("enum"), list):
        values = schema["enum"]
    elif kinds == {"boolean"}:
        values = [True, False]
    elif kinds == {"null"}:
        values = [None]
    else:
        return None
    unique = {json.dumps(v, sort_keys=True): v for v in values if type_of(v) in kinds}
    return list(unique.values())


def refs(node, path: str = "#"):
    """Every ``$ref`` in a document: (where, the reference)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield path, value
            elif key not in ("enum", "const", "default", "examples"):
                yield from refs(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from refs(value, f"{path}/{i}")


def pointed(root, ref: str):
    node = root
    for part in ref[1:].lstrip("/").split("/") if ref not in ("#", "#/") else []:
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def resolves(root, ref: str) -> bool:
    if not ref.startswith("#"):
        return False
    try:
        pointed(root, ref)
    except (KeyError, IndexError, ValueError, TypeError):
        return False
    return True


def schemas(node, path: str = "#"):
    """Every schema object in a document, with its JSON pointer, outermost first."""
    if not isinstance(node, dict):
        return
    yield path, node
    for key, value in node.items():
        for suffix, sub in keywords.subschemas(key, value):
            yield from schemas(sub, path + suffix)
