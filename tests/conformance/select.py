"""A pytest plugin for the conformance run (``-p tests.conformance.select``): with
``LLAMA_FFI_CONFORMANCE_ONLY`` naming a file of test ids, only those run (the tests llama-server
passes: the others cost a server start each and count for nothing). The suite's session start,
which starts and stops a server of every preset to download its model, is skipped: the shim's
models are local (a second a preset, each run)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def pytest_configure(config) -> None:
    utils = sys.modules.get("utils")  # the suite's helpers, imported by its conftest already
    if utils is not None:
        utils.ServerPreset.load_all = staticmethod(lambda: None)


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
