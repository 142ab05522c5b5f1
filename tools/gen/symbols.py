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
