"""Lends llama-ffi the ``llama_cpp`` name (``llama_ffi.install_as_llama_cpp()``).

A top-level module of its own so that the start-up hook (``llama_ffi_as_llama_cpp.pth``, run by
``site`` in every interpreter of the environment) can read ``LLAMA_FFI_AS_LLAMA_CPP`` without
importing ``llama_ffi``, which loads llama.cpp: the libraries load only when a program imports
``llama_cpp``. Nothing here imports llama-ffi until then.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import warnings

NAME = "llama_cpp"
TARGET = "llama_ffi.llama_cpp"
ENV = "LLAMA_FFI_AS_LLAMA_CPP"  # "1": lend the name; "force": even beside a real llama-cpp-python


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``llama_cpp`` and ``llama_cpp.X`` are ``llama_ffi.llama_cpp`` and ``llama_ffi.llama_cpp.X``:
    the same module objects under two names, imported on first use."""

    def find_spec(self, fullname, path, target=None):
        if fullname != NAME and not fullname.startswith(NAME + "."):
            return None
        real = TARGET + fullname[len(NAME) :]
        spec = importlib.util.find_spec(real)
        if spec is None:
            return None
        alias = importlib.util.spec_from_loader(fullname, self, is_package=spec.submodule_search_locations is not None)
        alias.loader_state = {"real": real}
        return alias

    def create_module(self, spec):
        module = importlib.import_module(spec.loader_state["real"])
        spec.loader_state["spec"] = module.__spec__  # importlib sets __spec__ to the alias's: put it back
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = module.__spec__.loader_state["spec"]


def _real_llama_cpp_installed() -> bool:
    return any(
        not isinstance(finder, _Alias) and hasattr(finder, "find_spec") and finder.find_spec(NAME, None) is not None
        for finder in sys.meta_path
    )


def install(force: bool = False) -> bool:
    """Make ``import llama_cpp`` (and each of its submodules) resolve to llama-ffi in this process.
    Returns True when the name is lent. A real llama-cpp-python, installed or already imported, is
    never shadowed silently: without ``force`` this warns and returns False."""
    if any(isinstance(finder, _Alias) for finder in sys.meta_path):
        return True
    loaded = sys.modules.get(NAME)
    if loaded is not None and not getattr(loaded, "__name__", "").startswith(TARGET):
        if not force:
            warnings.warn(
                "llama_cpp is already imported from llama-cpp-python; llama-ffi does not replace it "
                "(install_as_llama_cpp(force=True) to replace it in this process)",
                stacklevel=2,
            )
            return False
        for name in [m for m in sys.modules if m == NAME or m.startswith(NAME + ".")]:
            del sys.modules[name]
    elif not force and _real_llama_cpp_installed():
        warnings.warn(
            "llama-cpp-python is installed: `import llama_cpp` keeps importing it. Uninstall it, or "
            "pass install_as_llama_cpp(force=True) (LLAMA_FFI_AS_LLAMA_CPP=force) to lend llama-ffi the name",
            stacklevel=2,
        )
        return False
    sys.meta_path.insert(0, _Alias())
    return True


def install_from_environment() -> None:
    """The start-up hook: lend the name when ``LLAMA_FFI_AS_LLAMA_CPP`` is 1 (or force)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return
    install(force=value == "force")
