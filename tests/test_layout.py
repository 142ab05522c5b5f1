"""The house's rules, read from the source: imports flow one way (no circles, function-local
imports included; the runtime never imports build-time code, the benchmark or the server from the
high-level API), and no module of the runtime package grows past 450 lines."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llama_ffi"
MAX_LINES = 450


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules ``name`` imports, anywhere in it. The root package's lazy ``__getattr__`` (its
    high-level names, resolved on first use) is not an import of the package's own modules."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = ast.walk(tree)
    if name == "llama_ffi":
        nodes = (n for top in tree.body if not isinstance(top, ast.FunctionDef) for n in ast.walk(top))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known and target.split(".")[0] == "llama_ffi":
                target = target.rpartition(".")[0]
            found.add(target)
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    sources = dict(known)
    known["llama_ffi._lib"] = PACKAGE  # the compiled module: a leaf
    return {name: imports_of(name, path, known) for name, path in sources.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    assert cycles(graph()) == []


def test_imports_flow_one_way():
    wrong = collections.defaultdict(set)
    for name, targets in graph().items():
        for target in targets:
            if target.split(".")[0] in ("tools", "bench", "build_ffi", "tests"):
                wrong[name].add(target)  # the runtime never imports build-time code or the benchmark
            if name.startswith("llama_ffi.high") and target.startswith(
                ("llama_ffi.server", "llama_ffi.cli", "llama_ffi.model_flags", "llama_ffi.sampling_flags")
            ):
                wrong[name].add(target)  # the high-level API knows nothing of its faces
    assert dict(wrong) == {}


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_runtime_module_is_over_450_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
