"""Exported symbols of the built shared libraries: a declared function is bound only if defined."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tools.gen.errors import GenerationError


def exported_functions(libraries: list[Path]) -> dict[str, str]:
    """Map each exported (defined, dynamic) symbol to the library that defines it."""
    nm = shutil.which("nm")
    if not nm:
        raise GenerationError("nm not found: install binutils to check symbols against the libraries")
    out: dict[str, str] = {}
    for lib in libraries:
        proc = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise GenerationError(f"nm failed on {lib}: {proc.stderr.strip()}")
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TtWiDBR":
                out.setdefault(parts[2].split("@")[0], lib.name)
    return out


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
