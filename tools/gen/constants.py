"""Object-like ``#define`` constants of the bound headers, classified as integer, float or string.

Only macros whose full expansion is a constant expression are bound; the rest (API and
attribute macros, include guards, function-like macros) are reported, never silently bound wrong.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pycparser import CParser, c_ast
from pycparser.c_parser import ParseError

from tools.gen.headers import BOUND_HEADERS, BoundHeader
from tools.gen.preprocess import run_cpp, translation_unit

INT, FLOAT, STRING = "int", "float", "string"
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)(?=\s|$)", re.M)
_MARK = "__llama_ffi_macro_"
_INT_TYPES = {"int", "unsigned int", "long int", "unsigned long int", "long long int", "unsigned long long int", "char"}


@dataclasses.dataclass(frozen=True)
class Constant:
    name: str
    header: BoundHeader
    kind: str | None  # INT, FLOAT, STRING, or None when not a constant
    expansion: str

    def cdef(self) -> str:
        return {
            INT: f"#define {self.name} ...",
            FLOAT: f"static const double {self.name};",
            STRING: f"static const char *const {self.name};",
        }[self.kind]


def defined_names(tree: Path) -> list[tuple[str, BoundHeader]]:
    seen, out = set(), []
    for h in BOUND_HEADERS:
        for name in _DEFINE.findall(h.path(tree).read_text()):
            if name not in seen:
                seen.add(name)
                out.append((name, h))
    return out


def expand(tree: Path, names: list[str]) -> dict[str, str]:
    probe = "".join(f"\n{_MARK}{i} {n}\n" for i, n in enumerate(names))
    text = run_cpp(tree, translation_unit(probe), "-P")
    out = {}
    for line in text.splitlines():
        if line.startswith(_MARK):
            idx, _, value = line[len(_MARK) :].partition(" ")
            out[names[int(idx)]] = value.strip()
    return out


def kind_of(expr: c_ast.Node, enumerators: set[str]) -> str | None:
    if isinstance(expr, c_ast.Constant):
        if expr.type in _INT_TYPES:
            return INT
        if expr.type in ("float", "double", "long double"):
            return FLOAT
        return STRING if expr.type == "string" else None
    if isinstance(expr, c_ast.ID):
        return INT if expr.name in enumerators else None
    if isinstance(expr, c_ast.UnaryOp):
        if expr.op == "sizeof":
            return INT
        return kind_of(expr.expr, enumerators) if expr.op in ("-", "+", "~", "!") else None
    if isinstance(expr, c_ast.BinaryOp):
        kinds = {kind_of(expr.left, enumerators), kind_of(expr.right, enumerators)}
        if kinds <= {INT}:
            return INT
        return FLOAT if kinds <= {INT, FLOAT} else None
    if isinstance(expr, c_ast.Cast):
        inner = kind_of(expr.expr, enumerators)
        names = getattr(getattr(expr.to_type.type, "type", None), "names", [])
        if inner in (INT, FLOAT) and names:
            return FLOAT if any(n in ("float", "double") for n in names) else INT
        return None
    return None


def classify(expansion: str, enumerators: set[str]) -> str | None:
    if not expansion:
        return None
    try:
        ast = CParser().parse(f"void __f(void) {{ ({expansion}); }}")
    except ParseError:
        return None
    expr = ast.ext[0].body.block_items[0]
    return kind_of(expr, enumerators)


def constants(tree: Path, enumerators: set[str]) -> list[Constant]:
    names = defined_names(tree)
    values = expand(tree, [n for n, _ in names])
    out = []
    for name, header in names:
        value = values.get(name, name)
        if value == name:
            continue  # defined only in an inactive #if branch
        out.append(Constant(name, header, classify(value, enumerators), value))
    return out
