"""Parse preprocessed text with pycparser into declarations tagged with their bound header."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pycparser import CParser, c_ast
from pycparser.c_parser import ParseError

from tools.gen.errors import GenerationError, located
from tools.gen.headers import BoundHeader, header_for_file

FUNCTION, TYPEDEF, TAG, VARIABLE = "function", "typedef", "tag", "variable"


@dataclasses.dataclass
class Declaration:
    kind: str  # FUNCTION, TYPEDEF, TAG (struct/union/enum) or VARIABLE
    name: str  # C name; for a tag "struct llama_model" etc.
    header: BoundHeader
    line: int
    node: c_ast.Node


def parse(text: str) -> c_ast.FileAST:
    parser = CParser()
    try:
        return parser.parse(text, filename="<headers>")
    except ParseError as exc:
        # pycparser's message usually starts with file:line:col (from the line markers); some
        # messages name only the file, so add the lexer's current line.
        message = str(exc)
        file, _, rest = message.partition(": ")
        if not re.match(r"^.+:\d+", file):
            line = getattr(parser.clex, "_lineno", None)
            message = f"{file}:{line}: {rest}" if line else message
        raise GenerationError(f"cannot parse the headers: {message}") from None


def _tag_name(t: c_ast.Node) -> str:
    kind = {c_ast.Struct: "struct", c_ast.Union: "union", c_ast.Enum: "enum"}[type(t)]
    return f"{kind} {t.name}"


def classify(node: c_ast.Node) -> tuple[str, str]:
    """(kind, name) of one top-level node; anything the generator does not know is an error."""
    if isinstance(node, c_ast.Typedef):
        return TYPEDEF, node.name
    if isinstance(node, c_ast.Decl):
        if isinstance(node.type, c_ast.FuncDecl):
            return FUNCTION, node.name
        if node.name is None and isinstance(node.type, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
            if node.type.name is None:
                raise located(node.coord, "anonymous struct/union/enum at file scope is not bindable")
            return TAG, _tag_name(node.type)
        if node.name and isinstance(node.type, (c_ast.TypeDecl, c_ast.ArrayDecl, c_ast.PtrDecl)):
            return VARIABLE, node.name
    raise located(
        getattr(node, "coord", None), f"the generator does not understand this construct ({type(node).__name__})"
    )


def declarations(ast: c_ast.FileAST, tree: Path) -> list[Declaration]:
    """Every top-level declaration that comes from a bound header, in source order."""
    out = []
    for node in ast.ext:
        header = header_for_file(node.coord.file, tree) if node.coord else None
        if header is None:
            continue  # libc (fake headers) or the translation unit itself
        kind, name = classify(node)
        out.append(Declaration(kind, name, header, node.coord.line, node))
    return out
