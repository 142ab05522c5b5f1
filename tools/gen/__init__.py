"""The bindings generator: headers → preprocessor → pycparser AST → cffi cdef text.

One module per step: ``preprocess`` (C preprocessor), ``parse`` (pycparser, origin of each
declaration), ``transform`` (cffi-ready visitors), ``constants`` (#define values), ``emit``
(cdef text), ``symbols`` (what the built libraries export) and ``coverage`` (the report).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tools.gen import constants, emit, parse, preprocess
from tools.gen.errors import GenerationError
from tools.gen.headers import BoundHeader
from tools.gen.parse import FUNCTION, Declaration

__all__ = ["Bindings", "GenerationError", "generate"]


@dataclasses.dataclass
class Bindings:
    commit: str
    declarations: list[Declaration]
    constants: list[constants.Constant]

    def files(self, exported: set[str] | None = None) -> dict[BoundHeader, str]:
        """Cdef text per header; with ``exported``, functions no library defines are left out."""
        keep = (lambda d: True) if exported is None else (lambda d: d.kind != FUNCTION or d.name in exported)
        return emit.cdef_files(self.declarations, self.constants, self.commit, keep)

    def cdef(self, exported: set[str] | None = None) -> str:
        return "\n".join(self.files(exported).values())

    def functions(self) -> list[Declaration]:
        return [d for d in self.declarations if d.kind == FUNCTION]


def _enumerators(decls: list[Declaration]) -> set[str]:
    from pycparser import c_ast

    names: set[str] = set()

    class Collect(c_ast.NodeVisitor):
        def visit_Enumerator(self, node):
            names.add(node.name)

    for d in decls:
        Collect().visit(d.node)
    return names


def generate(tree: Path, commit: str) -> Bindings:
    text = preprocess.preprocess(tree)
    decls = parse.declarations(parse.parse(text), tree)
    return Bindings(commit, decls, constants.constants(tree, _enumerators(decls)))
