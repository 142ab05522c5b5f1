"""Which llama.cpp headers the bindings cover, and where they live in a tree."""

from __future__ import annotations

import dataclasses
from pathlib import Path

FAKE_LIBC = Path(__file__).resolve().parent / "fake_libc"


@dataclasses.dataclass(frozen=True)
class BoundHeader:
    name: str  # file name, e.g. "llama.h"
    subdir: str  # folder inside the tree, e.g. "include"

    def path(self, tree: Path) -> Path:
        return tree / self.subdir / self.name

    @property
    def cdef_name(self) -> str:
        return self.name.removesuffix(".h") + ".cdef"


# The translation unit includes these in this order; every declaration they make is bound.
BOUND_HEADERS: tuple[BoundHeader, ...] = (
    BoundHeader("ggml.h", "ggml/include"),
    BoundHeader("ggml-alloc.h", "ggml/include"),
    BoundHeader("ggml-backend.h", "ggml/include"),
    BoundHeader("ggml-cpu.h", "ggml/include"),
    BoundHeader("ggml-opt.h", "ggml/include"),
    BoundHeader("gguf.h", "ggml/include"),
    BoundHeader("ggml-rpc.h", "ggml/include"),
    BoundHeader("llama.h", "include"),
    BoundHeader("mtmd.h", "tools/mtmd"),
    BoundHeader("mtmd-helper.h", "tools/mtmd"),
)


def include_dirs(tree: Path) -> list[Path]:
    return sorted({(tree / h.subdir) for h in BOUND_HEADERS}, key=str)


def header_for_file(file: str, tree: Path) -> BoundHeader | None:
    """The bound header a preprocessor line marker names, or None (libc, other headers)."""
    p = Path(file)
    if not p.is_absolute():
        p = tree / p
    for h in BOUND_HEADERS:
        if p.resolve() == h.path(tree).resolve():
            return h
    return None
