"""JSON Schema → GBNF: a grammar whose every sentence is JSON valid against the schema.

One rule per schema node, named after its path; ``$ref`` targets become shared (possibly
recursive) rules. Keywords that constrain values in ways the grammar does not enforce raise
``UnsupportedSchemaError`` instead of being silently ignored; annotations (title, description,
examples, ...) are skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from llama_ffi.high.errors import RequestValueError


class UnsupportedSchemaError(RequestValueError):
    pass


ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$defs",
        "definitions",
    }
)
KEYWORDS = (
    frozenset(
        {
            "type",
            "properties",
            "required",
            "additionalProperties",
            "items",
            "minItems",
            "maxItems",
            "enum",
            "const",
            "anyOf",
            "oneOf",
            "$ref",
            "minLength",
            "maxLength",
            "format",
        }
    )
    | ANNOTATIONS
)

SPACE = '| " " | "\\n" [ \\t]{0,20}'  # bounded: a model cannot stall in endless whitespace
PRIMITIVES = {
    "space": SPACE,
    "boolean": '("true" | "false") space',
    "null": '"null" space',
    "integral-part": "[0] | [1-9] [0-9]{0,15}",
    "integer": '("-"? integral-part) space',
    "number": '("-"? integral-part) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? space',
    "char": '[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "string": '"\\"" char* "\\"" space',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" space ( string ":" space value ("," space string ":" space value)* )? "}" space',
    "array": '"[" space ( value ("," space value)* )? "]" space',
}
# Which primitive rules each one uses (only what a grammar needs is emitted).
PRIMITIVE_DEPS = {
    "integer": ["integral-part", "space"],
    "number": ["integral-part", "space"],
    "string": ["char", "space"],
    "boolean": ["space"],
    "null": ["space"],
    "value": ["object", "array", "string", "number", "boolean", "null"],
    "object": ["string", "value", "space"],
    "array": ["value", "space"],
}
FORMATS = {
    "date": '[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])',
    "time": '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? '
    '("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])',
    "uuid": '[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}',
}
FORMATS["date-time"] = f"{FORMATS['date']} [Tt ] {FORMATS['time']}"


def literal(value) -> str:
    """A GBNF string literal matching exactly the JSON text of ``value``."""
    text = json.dumps(value, ensure_ascii=False)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _rule_name(path: str) -> str:
    return re.sub(r"[^a-zA-Z0-9-]+", "-", path).strip("-") or "root"


class SchemaConverter:
    def __init__(self, root: dict) -> None:
        if not isinstance(root, (dict, bool)):
            raise UnsupportedSchemaError(f"a JSON Schema must be an object or a boolean, got {type(root).__name__}")
        self.root = root
        self.rules: dict[str, str] = {}
        self.refs: dict[str, str] = {}

    # ---- rules -------------------------------------------------------------------------------------
    def _add(self, name: str, body: str) -> str:
        base, n = name, 1
        while name in self.rules and self.rules[name] != body:
            n += 1
            name = f"{base}-{n}"
        self.rules[name] = body
        return name

    def _primitive(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = PRIMITIVES[name]
            for dep in PRIMITIVE_DEPS.get(name, []):
                self._primitive(dep)
        return name

    # ---- schema nodes --------------------------------------------------------------------------------
    def visit(self, schema, path: str) -> str:
        """The rule name for ``schema`` (one JSON value followed by optional space)."""
        if schema is True or schema == {}:
            return self._primitive("value")
        if schema is False:
            raise UnsupportedSchemaError(f"{path}: the schema 'false' accepts no value")
        if not isinstance(schema, dict):
            raise UnsupportedSchemaError(f"{path}: a schema must be an object, got {schema!r}")
        unknown = sorted(set(schema) - KEYWORDS)
        if unknown:
            raise UnsupportedSchemaError(f"{path}: unsupported JSON Schema keyword(s): {', '.join(unknown)}")
        name = _rule_name(path)
        if "$ref" in schema:
            return self._ref(schema["$ref"], path)
        if "const" in schema:
            return self._with_space(self._add(name, f"{literal(schema['const'])} space"))
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise UnsupportedSchemaError(f"{path}: enum must be a non-empty list")
            return self._with_space(self._add(name, "(" + " | ".join(literal(v) for v in values) + ") space"))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = schema[key]
                if not isinstance(options, list) or not options:
                    raise UnsupportedSchemaError(f"{path}: {key} must be a non-empty list")
                rules = [self.visit(s, f"{path}-{key}-{i}") for i, s in enumerate(options)]
                return self._add(name, " | ".join(rules))
        kind = schema.get("type")
        if isinstance(kind, list):
            rules = [self.visit({**schema, "type": k}, f"{path}-{k}") for k in kind]
            return self._add(name, " | ".join(rules))
        if kind is None:
            if "properties" in schema or "additionalProperties" in schema:
                kind = "object"
            elif "items" in schema:
                kind = "array"
            else:
                return self._primitive("value")
        handler: Callable | None = {
            "object": self._object,
            "array": self._array,
            "string": self._string,
            "integer": lambda s, p, n: self._primitive("integer"),
            "number": lambda s, p, n: self._primitive("number"),
            "boolean": lambda s, p, n: self._primitive("boolean"),
            "null": lambda s, p, n: self._primitive("null"),
        }.get(kind)
        if handler is None:
            raise UnsupportedSchemaError(f"{path}: unknown type {kind!r}")
        return handler(schema, path, name)

    def _with_space(self, name: str) -> str:
        self._primitive("space")
        return name

    def _ref(self, ref: str, path: str) -> str:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise UnsupportedSchemaError(f"{path}: only local $ref (#/...) are supported, got {ref!r}")
        if ref in self.refs:
            return self.refs[ref]
        target = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise UnsupportedSchemaError(f"{path}: $ref {ref!r} does not resolve")
            target = target[part]
        name = _rule_name("ref-" + ref[1:])
        self.refs[ref] = name
        self.rules[name] = ""  # reserved: recursive references see the name
        body_rule = self.visit(target, name + "-body")
        self.rules[name] = body_rule
        return name

    def _string(self, schema: dict, path: str, name: str) -> str:
        fmt = schema.get("format")
        if fmt is not None:
            if fmt not in FORMATS:
                raise UnsupportedSchemaError(
                    f"{path}: unsupported string format {fmt!r} (supported: {', '.join(sorted(FORMATS))})"
                )
            return self._with_space(self._add(name, f'"\\"" {FORMATS[fmt]} "\\"" space'))
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        if lo == 0 and hi is None:
            return self._primitive("string")
        for key, v in (("minLength", lo), ("maxLength", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise UnsupportedSchemaError(f"{path}: {key} must be a non-negative integer")
        self._primitive("char")
        repeat = f"{{{lo},{'' if hi is None else hi}}}"
        return self._with_space(self._add(name, f'"\\"" char{repeat} "\\"" space'))

    def _array(self, schema: dict, path: str, name: str) -> str:
        items = schema.get("items", True)
        if isinstance(items, list):  # the tuple form (draft 4): exactly these, in order, as llama.cpp reads it
            self._primitive("space")
            parts = [self.visit(s, f"{path}-tuple-{i}") for i, s in enumerate(items)]
            return self._add(name, '"[" space ' + ' "," space '.join(parts) + (" " if parts else "") + '"]" space')
        item = self.visit(items, f"{path}-item")
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        for key, v in (("minItems", lo), ("maxItems", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise UnsupportedSchemaError(f"{path}: {key} must be a non-negative integer")
        if hi is not None and hi < lo:
            raise UnsupportedSchemaError(f"{path}: maxItems ({hi}) < minItems ({lo})")
        self._primitive("space")
        if hi == 0:
            return self._add(name, '"[" space "]" space')
        more = f'("," space {item}){{{max(lo - 1, 0)},{"" if hi is None else hi - 1}}}'
        body = f"{item} {more}"
        if lo == 0:
            body = f"({body})?"
        return self._add(name, f'"[" space {body} "]" space')

    def _object(self, schema: dict, path: str, name: str) -> str:
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise UnsupportedSchemaError(f"{path}: properties must be an object")
        required = schema.get("required", [])
        missing = [r for r in required if r not in props]
        if missing:
            raise UnsupportedSchemaError(f"{path}: required names properties that are not defined: {missing}")
        self._primitive("space")
        extra = schema.get("additionalProperties")
        kv = {
            k: self._add(_rule_name(f"{path}-{k}-kv"), f'{literal(k)} space ":" space {self.visit(v, f"{path}-{k}")}')
            for k, v in props.items()
        }
        if not props and isinstance(extra, dict) or (not props and extra in (None, True)):
            value = self.visit(extra, f"{path}-additional") if isinstance(extra, dict) else self._primitive("value")
            pair = self._add(f"{name}-pair", f'{self._primitive("string")} ":" space {value}')
            return self._add(name, f'"{{" space ({pair} ("," space {pair})*)? "}}" space')
        req = [kv[k] for k in props if k in required]
        opt = [kv[k] for k in props if k not in required]
        parts = ' "," space '.join(req)
        if opt:
            tail = self._optional_chain(name, opt, leading_comma=bool(req))
            parts = f"{parts} {tail}" if parts else tail
        return self._add(name, f'"{{" space {parts} "}}" space')

    def _optional_chain(self, name: str, opt: list[str], leading_comma: bool) -> str:
        """Any ordered subset of the optional properties, commas between."""
        if leading_comma:
            return " ".join(f'("," space {k})?' for k in opt)
        alternatives = []
        for i, k in enumerate(opt):
            rest = " ".join(f'("," space {o})?' for o in opt[i + 1 :])
            alternatives.append(f"{k} {rest}".strip())
        return "(" + " | ".join(alternatives) + ")?"

    def grammar(self) -> str:
        root = self.visit(self.root, "root")
        if root != "root":
            self.rules["root"] = root
        lines = [f"root ::= {self.rules.pop('root')}"]
        lines += [f"{k} ::= {v}" for k, v in self.rules.items()]
        return "\n".join(lines) + "\n"


def schema_to_gbnf(schema) -> str:
    """GBNF for ``schema``; raises ``UnsupportedSchemaError`` (a ``ValueError``) naming the keyword
    or construct it cannot express."""
    return SchemaConverter(schema).grammar()
