"""Import-time guard: the loaded shared libraries must be the build this module was compiled for.

The module records the sha256 of the libllama it was linked against and the llama.cpp commit it
was built from. At import the file that actually provides ``llama_backend_init`` (found with dladdr)
is hashed, and the commit libggml reports (``ggml_commit``, when it knows one) is compared: a
libllama from another build found first on the library path (``LD_LIBRARY_PATH``) would give
wrong struct layouts, so it is refused with an ImportError that names both builds.
"""

from __future__ import annotations

import hashlib

from llama_ffi._lib import ffi, lib


class LibraryMismatchError(ImportError):
    pass


def expected_commit() -> str:
    return ffi.string(lib.LLAMA_FFI_BUILD_COMMIT).decode()


def loaded_commit() -> str:
    return ffi.string(lib.ggml_commit()).decode()


def loaded_library() -> str:
    buf = ffi.new("char[]", 4096)
    if lib.llama_ffi_libllama_path(buf, 4096) != 0:
        return ""
    return ffi.string(buf).decode()


def file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def same_commit(expected: str, loaded: str) -> bool:
    """ggml reports a short hash (or what the build passed, or "unknown" without git)."""
    loaded = loaded.removesuffix("-dirty")
    if expected == "unknown" or loaded == "unknown":
        return expected == loaded
    return len(loaded) >= 7 and (expected.startswith(loaded) or loaded.startswith(expected))


def check_libraries(expected: str | None = None, expected_sha256: str | None = None) -> None:
    expected = expected if expected is not None else expected_commit()
    expected_sha256 = expected_sha256 or ffi.string(lib.LLAMA_FFI_LIBRARY_SHA256).decode()
    path = loaded_library()
    actual_sha256 = file_sha256(path) if path else ""
    loaded = loaded_commit()
    commit_known = "unknown" not in (expected, loaded.removesuffix("-dirty"))
    if (path and actual_sha256 != expected_sha256) or (commit_known and not same_commit(expected, loaded)):
        raise LibraryMismatchError(
            f"llama_ffi was built against llama.cpp {expected[:12]} (build {lib.LLAMA_FFI_BUILD_NUMBER}, "
            f"libllama sha256 {expected_sha256[:16]}…) but loaded {path or 'an unknown libllama'} "
            f"(sha256 {actual_sha256[:16]}…, ggml commit {loaded}): another llama.cpp build is first on "
            f"the library path (LD_LIBRARY_PATH?). Remove it from the path, or rebuild llama_ffi "
            f"against it with `pip install .`."
        )
