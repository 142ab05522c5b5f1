"""Import-time guard: the loaded shared libraries must be the build this module was compiled for.

The module records the llama.cpp commit it was compiled against; the loaded libggml reports the
commit it was built from (``ggml_commit``). A libllama/libggml from another build found first on
the library path (``LD_LIBRARY_PATH``) would give wrong struct layouts, so it is refused.
"""

from __future__ import annotations

from llama_ffi._lib import ffi, lib


class LibraryMismatchError(ImportError):
    pass


def expected_commit() -> str:
    return ffi.string(lib.LLAMA_FFI_BUILD_COMMIT).decode()


def loaded_commit() -> str:
    return ffi.string(lib.ggml_commit()).decode()


def same_commit(expected: str, loaded: str) -> bool:
    """ggml reports a short hash (or what the build passed, or "unknown" without git)."""
    loaded = loaded.removesuffix("-dirty")
    if expected == "unknown" or loaded == "unknown":
        return expected == loaded
    return len(loaded) >= 7 and (expected.startswith(loaded) or loaded.startswith(expected))


def check_libraries(expected: str | None = None) -> None:
    expected = expected if expected is not None else expected_commit()
    loaded = loaded_commit()
    if not same_commit(expected, loaded):
        raise LibraryMismatchError(
            f"llama_ffi was built against llama.cpp {expected[:12]} (build "
            f"{lib.LLAMA_FFI_BUILD_NUMBER}) but the loaded libggml reports commit {loaded}: another "
            f"llama.cpp build is first on the library path (LD_LIBRARY_PATH?). Remove it from "
            f"the path, or rebuild llama_ffi against it with `pip install .`."
        )
