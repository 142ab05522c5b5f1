"""Exported symbols of the built shared libraries: a declared function is bound only if defined."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from tools.gen.errors import GenerationError


def exported_functions(libraries: list[Path]) -> dict[str, str]:
    """Map each exported (defined, dynamic) symbol to the library that defines it."""
    out: dict[str, str] = {}
    for lib in libraries:
        stat = lib.stat()
        for name in _defined_symbols(str(lib), stat.st_mtime_ns, stat.st_size):
            out.setdefault(name, lib.name)
    return out


@functools.lru_cache(maxsize=256)
def _defined_symbols(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """One ``nm`` per library file and version of it: a build classifies each library (linked or a
    backend module), then binds what the linked ones export."""
    nm = shutil.which("nm")
    if not nm:
        raise GenerationError("nm not found: install binutils to check symbols against the libraries")
    proc = subprocess.run([nm, "-D", "--defined-only", path], capture_output=True, text=True)
    if proc.returncode != 0:
        raise GenerationError(f"nm failed on {path}: {proc.stderr.strip()}")
    return tuple(
        parts[2].split("@")[0]
        for parts in map(str.split, proc.stdout.splitlines())
        if len(parts) == 3 and parts[1] in "TtWiDBR"
    )


# What ggml's backend loader looks up in a file it dlopens (GGML_BACKEND_DL_IMPL): a library that
# defines it is a loadable backend module, never linked.
BACKEND_MODULE_ENTRY = "ggml_backend_init"


def is_backend_module(library: Path) -> bool:
    return BACKEND_MODULE_ENTRY in exported_functions([library])


def gnu_build_id(library: Path) -> str:
    """The library's GNU build ID (hex), or "" when it has none (or readelf is missing)."""
    readelf = shutil.which("readelf")
    if not readelf:
        return ""
    proc = subprocess.run([readelf, "-n", str(library)], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.strip().startswith("Build ID:"):
            return line.split(":", 1)[1].strip()
    return ""
