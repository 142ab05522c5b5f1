"""A pytest plugin for the conformance run (``-p tests.conformance.select``): with
``LLAMA_FFI_CONFORMANCE_ONLY`` naming a file of test ids, only those run (the tests llama-server
passes: the others cost a server start each and count for nothing)."""

from __future__ import annotations

import os
from pathlib import Path


def pytest_collection_modifyitems(config, items) -> None:
    listed = os.environ.get("LLAMA_FFI_CONFORMANCE_ONLY")
    if not listed:
        return
    wanted = set(Path(listed).read_text().splitlines())
    keep = [item for item in items if item.nodeid in wanted]
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
