"""Visitors that turn a C declaration into one cffi's cdef accepts, without changing its meaning.

- array sizes that are not integer literals become ``[...]``: cffi then asks the compiler;
- initialisers of ``static const`` variables are dropped: the compiler supplies the value;
- ``restrict`` qualifiers are dropped: they do not change a type's layout or calling convention;
- ``extern`` on prototypes is dropped.
"""

from __future__ import annotations

from pycparser import c_ast

DROPPED_QUALIFIERS = {"restrict", "__restrict", "__restrict__"}


def is_integer_literal(node: c_ast.Node | None) -> bool:
    return isinstance(node, c_ast.Constant) and node.type in (
        "int",
        "unsigned int",
        "long int",
        "unsigned long int",
        "long long int",
        "unsigned long long int",
    )


class ArraySizeToDots(c_ast.NodeVisitor):
    def visit_ArrayDecl(self, node: c_ast.ArrayDecl) -> None:
        if node.dim is not None and not is_integer_literal(node.dim):
            node.dim = c_ast.ID("...")
        self.generic_visit(node)


class DropRestrict(c_ast.NodeVisitor):
    def _clean(self, node) -> None:
        if getattr(node, "quals", None):
            node.quals = [q for q in node.quals if q not in DROPPED_QUALIFIERS]

    def visit_PtrDecl(self, node: c_ast.PtrDecl) -> None:
        self._clean(node)
        self.generic_visit(node)

    def visit_TypeDecl(self, node: c_ast.TypeDecl) -> None:
        self._clean(node)
        self.generic_visit(node)

    def visit_Decl(self, node: c_ast.Decl) -> None:
        self._clean(node)
        self.generic_visit(node)


def drop_static_initialiser(node: c_ast.Node) -> None:
    if isinstance(node, c_ast.Decl) and node.init is not None and "static" in node.storage:
        node.init = None


def drop_extern(node: c_ast.Node) -> None:
    # GGML_API expands to "extern" in C: meaningless on a prototype, noise in the cdef.
    if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl):
        node.storage = [s for s in node.storage if s != "extern"]


def make_cffi_ready(node: c_ast.Node) -> c_ast.Node:
    drop_extern(node)
    ArraySizeToDots().visit(node)
    DropRestrict().visit(node)
    drop_static_initialiser(node)
    return node
