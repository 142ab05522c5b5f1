"""The code blocks of a docs page, run as written: the server address the docs use
(``http://127.0.0.1:8080``) becomes the test server's, and what a block prints is returned."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOCS_URL = "http://127.0.0.1:8080"


def python_blocks(page: str) -> list[str]:
    """The ```python blocks of ``docs/<page>``, in order."""
    return re.findall(r"^```python\n(.*?)^```$", (DOCS / page).read_text(), flags=re.S | re.M)


def run_block(code: str, url: str) -> str:
    """Runs ``code`` against the server at ``url``; what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace(DOCS_URL, url), "<docs block>", "exec"), {"__name__": "__docs__"})  # noqa: S102
    return printed.getvalue()
