"""Copies of the pinned tree's bound headers in a scratch folder, for tests that mutate them."""

from __future__ import annotations

import shutil
from pathlib import Path

from tools.gen.headers import BOUND_HEADERS


def copy_headers(tree, dest: Path) -> Path:
    for h in BOUND_HEADERS:
        (dest / h.subdir).mkdir(parents=True, exist_ok=True)
        shutil.copy(h.path(tree.path), dest / h.subdir / h.name)
    for f in (tree.path / "ggml/include").glob("*.h"):  # included but not bound headers
        if not (dest / "ggml/include" / f.name).exists():
            shutil.copy(f, dest / "ggml/include" / f.name)
    return dest


def insert_before_closing(path: Path, text: str) -> int:
    """Insert ``text`` before the header's last ``#ifdef __cplusplus``; return its line number."""
    lines = path.read_text().splitlines(keepends=True)
    idx = max(i for i, line in enumerate(lines) if line.strip().startswith("#ifdef") and "__cplusplus" in line)
    lines.insert(idx, text + "\n")
    path.write_text("".join(lines))
    return idx + 1
