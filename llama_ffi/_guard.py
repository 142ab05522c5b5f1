"""Import-time guard: the loaded shared libraries must be the build this module was compiled for.

The module records the identity of the libllama it was linked against (its GNU build ID, the
linker's hash of its contents, which survives auditwheel rewriting run paths; the file's sha256
where there is none) and the llama.cpp commit it was built from. At import the loaded libllama
(the one providing ``llama_backend_init``) is identified the same way, and the commit libggml
reports (``ggml_commit``, when it knows one) is compared: a libllama from another build found first
(``LD_LIBRARY_PATH``, ``LD_PRELOAD``) would give wrong struct layouts, so it is refused with an
ImportError that names both builds.
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


def expected_identity() -> str:
    return ffi.string(lib.LLAMA_FFI_LIBRARY_ID).decode()


def loaded_identity(path: str, kind: str) -> str:
    """The loaded libllama's identity of the same kind as the recorded one."""
    if kind == "build-id":
        buf = ffi.new("unsigned char[]", 64)
        n = lib.llama_ffi_libllama_build_id(buf, len(buf))
        return "build-id:" + bytes(ffi.buffer(buf, n)).hex() if n > 0 else "build-id:none"
    return "sha256:" + file_sha256(path) if path else "sha256:unknown"


def same_commit(expected: str, loaded: str) -> bool:
    """ggml reports a short hash (or what the build passed, or "unknown" without git)."""
    loaded = loaded.removesuffix("-dirty")
    if expected == "unknown" or loaded == "unknown":
        return expected == loaded
    return len(loaded) >= 7 and (expected.startswith(loaded) or loaded.startswith(expected))


def check_libraries(expected: str | None = None, expected_id: str | None = None) -> None:
    expected = expected if expected is not None else expected_commit()
    expected_id = expected_id or expected_identity()
    path = loaded_library()
    actual_id = loaded_identity(path, expected_id.split(":")[0])
    loaded = loaded_commit()
    commit_known = "unknown" not in (expected, loaded.removesuffix("-dirty"))
    if actual_id != expected_id or (commit_known and not same_commit(expected, loaded)):
        raise LibraryMismatchError(
            f"llama_ffi was built against llama.cpp {expected[:12]} (build {lib.LLAMA_FFI_BUILD_NUMBER}, "
            f"libllama {expected_id[:26]}…) but loaded {path or 'an unknown libllama'} "
            f"({actual_id[:26]}…, ggml commit {loaded}): another llama.cpp build is first on "
            f"the library path (LD_LIBRARY_PATH or LD_PRELOAD?). Remove it from the path, or rebuild llama_ffi "
            f"against it with `pip install .`."
        )
