"""``LLAMA_FFI_CPU_VARIANT``: run ggml's CPU backend built for another x86 level than the best this
CPU allows, e.g. ``haswell`` (AVX2, no AVX-512) on an AVX-512 machine, to see what users of such
CPUs get. llama.cpp's CPU results depend on the instruction set, so this is how the numerics of
another CPU family are checked without one.

- A portable build (backend modules, ``GGML_CPU_ALL_VARIANTS``) ships every variant as
  ``lib/libggml-cpu-<name>.so``; ``backends.load_modules`` then loads that one instead of the best.
- A build for this machine links one CPU library. ``python -m tools.native_build --cpu-variant
  <name>`` builds another at that level into ``lib/cpu-variants/<name>/libggml-cpu.so``; here it
  is loaded before the compiled module, whose dependency on ``libggml-cpu.so`` it then satisfies
  (the dynamic loader matches libraries already loaded by their soname). Everything else stays
  this build's own, so the import guard's check of libllama holds.

This module uses ctypes only: it runs before the compiled module is imported.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

ENV = "LLAMA_FFI_CPU_VARIANT"
LIB_DIR = Path(__file__).resolve().parent / "lib"
LINKED_VARIANTS = LIB_DIR / "cpu-variants"

_preloaded: list[ctypes.CDLL] = []  # kept loaded for the process's life


def requested() -> str | None:
    name = os.environ.get(ENV, "").strip()
    return name or None


MODULE_PREFIX = "libggml-cpu-"


def module_path(name: str, folder: Path = LIB_DIR) -> Path:
    """A portable build's CPU module for ``name``."""
    return folder / f"{MODULE_PREFIX}{name}.so"


def modules(folder: Path = LIB_DIR) -> list[str]:
    """The variants a portable build's ``folder`` has a CPU module for."""
    return sorted(p.name[len(MODULE_PREFIX) : -len(".so")] for p in folder.glob(f"{MODULE_PREFIX}*.so"))


def linked_path(name: str) -> Path:
    """The CPU library built at level ``name`` for a build that links its CPU backend."""
    return LINKED_VARIANTS / name / "libggml-cpu.so"


def available() -> list[str]:
    linked = [p.parent.name for p in LINKED_VARIANTS.glob("*/libggml-cpu.so")]
    return sorted(set(modules() + linked))


def preload() -> None:
    """Before the compiled module loads: put the requested variant's CPU library in place of this
    build's own (a linked build only; a portable build chooses among its modules later)."""
    name = requested()
    if name is None or module_path(name).is_file():
        return
    path = linked_path(name)
    if not path.is_file():
        raise ImportError(
            f"{ENV}={name!r}: no such CPU variant in this build (available: "
            f"{', '.join(available()) or 'none'}); build it with "
            f"`python -m tools.native_build --cpu-variant {name}`"
        )
    unsupported = missing_features(path)
    if unsupported:
        raise ImportError(f"{ENV}={name!r}: this CPU lacks {', '.join(unsupported)}, which that variant needs")
    # The base library first, from this build, so that the variant links against it and not a copy.
    _preloaded.append(ctypes.CDLL(str(LIB_DIR / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL))
    _preloaded.append(ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL))


def missing_features(path: Path) -> list[str]:
    """The CPU flags (``/proc/cpuinfo`` names) the variant at ``path`` was built for and this CPU
    lacks; its ``features`` file lists them (written by tools.native_build)."""
    listed = path.with_name("features")
    if not listed.is_file():
        return []
    wanted = listed.read_text().split()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [f for f in wanted if f not in flags]
