"""Snapshot of a llama.cpp tree's public ABI, measured by compiling a probe with the C compiler.

Recorded: every struct/union defined in the bound headers (size, alignment, and each field's
type, offset and size), every enum constant's value, every function's signature, typedefs and
callback types, and the ``#define`` constants. Sizes, offsets and values come from the compiled
probe, never from Python arithmetic.

    python -m tools.abi.snapshot [TREE] [-o headers/abi.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pycparser import c_ast, c_generator

from tools.gen import GenerationError, generate
from tools.gen.constants import INT, STRING
from tools.gen.headers import BOUND_HEADERS, include_dirs
from tools.gen.parse import FUNCTION, TAG, TYPEDEF
from tools.gen.preprocess import compiler

SNAPSHOT_VERSION = 1


class SnapshotError(RuntimeError):
    pass


def _type_text(node: c_ast.Node) -> str:
    return c_generator.CGenerator()._generate_type(node, emit_declname=False).strip()


def _struct_of(node: c_ast.Node):
    """(name, Struct/Union node) when ``node`` defines a struct or union, else None."""
    if isinstance(node, c_ast.Typedef):
        inner = node.type.type if isinstance(node.type, c_ast.TypeDecl) else None
        if isinstance(inner, (c_ast.Struct, c_ast.Union)) and inner.decls is not None:
            kind = "struct" if isinstance(inner, c_ast.Struct) else "union"
            return (f"{kind} {inner.name}" if inner.name else node.name), inner
    if isinstance(node, c_ast.Decl) and isinstance(node.type, (c_ast.Struct, c_ast.Union)):
        t = node.type
        if t.decls is not None and t.name:
            return f"{'struct' if isinstance(t, c_ast.Struct) else 'union'} {t.name}", t
    return None


def _fields(struct: c_ast.Node, prefix: str = "") -> list[tuple[str, str]]:
    """(field path, type text), anonymous struct/union members flattened (C11 lets offsetof
    name their fields directly)."""
    out = []
    for d in struct.decls or []:
        if d.name is None and isinstance(d.type, (c_ast.Struct, c_ast.Union)):
            out += _fields(d.type, prefix)
        elif d.name is not None:
            if d.bitsize is not None:
                raise SnapshotError(f"{d.coord}: bit-field {d.name} cannot be measured with offsetof")
            out.append((prefix + d.name, _type_text(d.type)))
    return out


def _enumerators(node: c_ast.Node) -> list[tuple[str, str]]:
    found = []

    class Visit(c_ast.NodeVisitor):
        def visit_Enum(self, e):
            if e.values is not None:
                for v in e.values.enumerators:
                    found.append((v.name, f"enum {e.name}" if e.name else "enum"))

    Visit().visit(node)
    return found


def _probe_source(structs, fields, enums, consts) -> str:
    lines = [
        "#include <stdio.h>",
        "#include <stddef.h>",
        *(f'#include "{h.name}"' for h in BOUND_HEADERS),
        "int main(void) {",
    ]
    for name in structs:
        lines.append(f'  printf("S\\t{name}\\t%zu\\t%zu\\n", sizeof({name}), _Alignof({name}));')
    for name, field in fields:
        lines.append(
            f'  printf("F\\t{name}\\t{field}\\t%zu\\t%zu\\n", offsetof({name}, {field}), '
            f"sizeof((({name} *)0)->{field}));"
        )
    for name in enums:
        lines.append(f'  printf("E\\t{name}\\t%lld\\n", (long long)({name}));')
    for name, kind in consts:
        if kind == INT:
            lines.append(f'  printf("C\\t{name}\\t%lld\\n", (long long)({name}));')
        elif kind == STRING:
            lines.append(f'  printf("C\\t{name}\\t%s\\n", {name});')
        else:
            lines.append(f'  printf("C\\t{name}\\t%.17g\\n", (double)({name}));')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def run_probe(tree: Path, source: str) -> list[list[str]]:
    with tempfile.TemporaryDirectory(prefix="llama-ffi-abi-") as tmp:
        src, exe = Path(tmp) / "abi_probe.c", Path(tmp) / "abi_probe"
        src.write_text(source)
        cmd = [compiler(), "-std=c11", "-w", *(f"-I{d}" for d in include_dirs(tree)), str(src), "-o", str(exe)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            kept = Path(tempfile.gettempdir()) / "llama-ffi-abi_probe.c"
            kept.write_text(source)
            raise SnapshotError(
                f"the ABI probe for {tree} failed to compile (source kept at {kept}):\n{proc.stderr.strip()[-3000:]}"
            )
        run = subprocess.run([str(exe)], capture_output=True, text=True)
        if run.returncode != 0:
            raise SnapshotError(f"the ABI probe for {tree} failed to run: {run.stderr.strip()}")
    return [line.split("\t") for line in run.stdout.splitlines()]


def take(tree: Path, commit: str = "unknown") -> dict:
    """The snapshot of ``tree`` as a JSON-ready dict."""
    bindings = generate(tree, commit)
    structs: dict[str, dict] = {}
    field_types: dict[tuple[str, str], str] = {}
    functions, typedefs, enum_types = {}, {}, {}
    for d in bindings.declarations:
        found = _struct_of(d.node)
        if found and found[0] not in structs:
            name, node = found
            structs[name] = {"header": d.header.name, "fields": []}
            for field, type_text in _fields(node):
                field_types[(name, field)] = type_text
        if d.kind == FUNCTION and d.name not in functions:
            functions[d.name] = {
                "header": d.header.name,
                "signature": c_generator.CGenerator().visit(d.node).replace("extern ", ""),
            }
        if d.kind == TYPEDEF and d.name not in typedefs:
            typedefs[d.name] = _type_text(d.node.type)
        if d.kind in (TAG, TYPEDEF):
            for enumerator, enum_type in _enumerators(d.node):
                enum_types.setdefault(enumerator, enum_type)
    consts = [(c.name, c.kind) for c in bindings.constants if c.kind]
    rows = run_probe(tree, _probe_source(list(structs), list(field_types), list(enum_types), consts))
    enums, constants = {}, {}
    for row in rows:
        if row[0] == "S":
            structs[row[1]].update(size=int(row[2]), align=int(row[3]))
        elif row[0] == "F":
            structs[row[1]]["fields"].append(
                {"name": row[2], "type": field_types[(row[1], row[2])], "offset": int(row[3]), "size": int(row[4])}
            )
        elif row[0] == "E":
            enums[row[1]] = {"type": enum_types[row[1]], "value": int(row[2])}
        elif row[0] == "C":
            constants[row[1]] = row[2] if len(row) > 2 else ""
    return {
        "version": SNAPSHOT_VERSION,
        "commit": commit,
        "structs": structs,
        "enums": enums,
        "functions": functions,
        "typedefs": typedefs,
        "constants": constants,
    }


def write(snapshot: dict, path: Path) -> None:
    """Atomic: a failed run never leaves a partial snapshot."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_or_take(source: str) -> dict:
    """A snapshot from a JSON file, or taken from a llama.cpp tree."""
    p = Path(source)
    if p.is_file():
        return json.loads(p.read_text())
    from tools.vendor import _git_describe, check_is_llama_tree

    check_is_llama_tree(p)
    return take(p, _git_describe(p)[0])


def main(argv: list[str] | None = None) -> int:
    from tools.vendor import VendorError, materialise

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree", nargs="?", help="a llama.cpp tree (default: the pinned one)")
    ap.add_argument("-o", "--output", type=Path, help="write the snapshot here (default: stdout)")
    args = ap.parse_args(argv)
    try:
        if args.tree:
            snap = load_or_take(args.tree)
        else:
            tree = materialise()
            snap = take(tree.path, tree.label)
    except (SnapshotError, GenerationError, VendorError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.output:
        write(snap, args.output)
    else:
        print(json.dumps(snap, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
