"""The installed distribution carries every module of the source package (a subpackage missing
from the wheel breaks `pip install . && llama-ffi complete ...` while the source-tree tests pass)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "llama_ffi"


def test_every_source_module_is_installed():
    try:
        files = metadata.files("llama-ffi") or []
    except metadata.PackageNotFoundError:
        pytest.skip("llama-ffi is not installed (pip install .)")
    installed = {str(f).replace("\\", "/") for f in files}
    if not any(f.startswith("llama_ffi/") for f in installed):
        pytest.skip("an editable install: the source tree is the package")
    wanted = {p.relative_to(SOURCE.parent).as_posix() for p in SOURCE.rglob("*.py")}
    missing = sorted(wanted - installed)
    assert not missing, f"not in the installed distribution: {missing}"
