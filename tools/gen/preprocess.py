"""Run the C preprocessor over the bound headers, keeping line markers (they name the origin)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tools.gen.errors import GenerationError
from tools.gen.headers import BOUND_HEADERS, FAKE_LIBC, include_dirs

# Make the GNU extensions used for visibility, deprecation and format checks vanish, so the text
# is plain C99 for pycparser. Nothing that changes a type or layout is defined away.
NEUTRAL_DEFINES = (
    "-D__attribute__(x)=",
    "-D__restrict=",
    "-D__restrict__=",
    "-D__asm__(x)=",
    "-D__declspec(x)=",
)


def compiler() -> str:
    # LLAMA_FFI_PREPROCESSOR: a build whose CC targets another system (the wheel's Zig compiler)
    # still reads the headers with this machine's: only the preprocessor runs, on our fake libc.
    cc = os.environ.get("LLAMA_FFI_PREPROCESSOR") or os.environ.get("CC")
    cc = cc or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise GenerationError("no C compiler found (set CC, or apt-get install build-essential)")
    return cc


def translation_unit(extra: str = "") -> str:
    return "".join(f'#include "{h.name}"\n' for h in BOUND_HEADERS) + extra


def run_cpp(tree: Path, source: str, *flags: str) -> str:
    """Preprocess ``source`` against the tree; libc comes from our fake headers only."""
    # Relative include paths keep the line markers (and so the generated files) machine-independent.
    dirs = (os.path.relpath(d, tree) for d in include_dirs(tree))
    cmd = [
        compiler(),
        "-E",
        "-nostdinc",
        "-std=c11",
        f"-I{FAKE_LIBC}",
        *(f"-I{d}" for d in dirs),
        *NEUTRAL_DEFINES,
        *flags,
        "-",
    ]
    proc = subprocess.run(cmd, input=source, capture_output=True, text=True, cwd=tree)
    if proc.returncode != 0:
        raise GenerationError(f"preprocessing the headers of {tree} failed:\n{proc.stderr.strip()}")
    return proc.stdout


def preprocess(tree: Path) -> str:
    return run_cpp(tree, translation_unit())
