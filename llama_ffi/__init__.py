"""llama-ffi: llama.cpp bindings generated from its headers and checked by the C compiler.

``from llama_ffi import ffi, lib`` gives the whole public C API (llama.h, ggml*.h, gguf.h,
mtmd.h); ``llama_ffi.high`` is the high-level API. The backend is initialised once, on import
(a portable build first loads its backend modules from the package's ``lib/`` folder), and native
logs go to the ``llama_ffi`` logger.
"""

from __future__ import annotations

from llama_ffi import _cpu_variant

_cpu_variant.preload()  # LLAMA_FFI_CPU_VARIANT: before the compiled module links its CPU library

try:
    from llama_ffi._lib import ffi, lib
except ImportError as exc:  # pragma: no cover - only without a build
    if "_lib" not in str(exc) or "undefined symbol" in str(exc):
        raise
    raise ImportError(
        "llama_ffi's compiled module is missing: build and install the package with `pip install .` "
        "(or `python setup.py build_ext --inplace` in a source checkout)"
    ) from exc

from llama_ffi import _logging
from llama_ffi import backends as _backends
from llama_ffi._guard import check_libraries as _check_libraries

__version__ = "0.1.0"
__all__ = ["ffi", "lib", "build_info", "install_as_llama_cpp", "__version__"]

_check_libraries()
_logging.install()
_backends.load_modules()
lib.llama_backend_init()


# llama-cpp-python's top-level names (``from llama_cpp import Llama`` becomes ``from llama_ffi
# import Llama``), imported on first use so that ``import llama_ffi`` stays the raw binding.
_HIGH_LEVEL = {"Llama", "LlamaGrammar", "LlamaEmbedding", "LlamaState", "LlamaCache", "LlamaRAMCache", "LlamaDiskCache"}


def __getattr__(name: str):
    if name in _HIGH_LEVEL:
        import llama_ffi.high as high

        return getattr(high, name)
    raise AttributeError(f"module 'llama_ffi' has no attribute {name!r}")


def build_info() -> dict[str, object]:
    """What this module was built from, what the loaded libraries report, and which backends and
    devices run: ``cpu_variant`` is the CPU module ggml chose in a portable build (``haswell``,
    ``zen4``, ...), ``native`` in one built for its machine."""
    cpu_library = _backends.cpu_library()
    return {
        "llama_cpp_commit": ffi.string(lib.LLAMA_FFI_BUILD_COMMIT).decode(),
        "llama_cpp_build_number": lib.LLAMA_FFI_BUILD_NUMBER,
        "cdef_sha256": ffi.string(lib.LLAMA_FFI_CDEF_SHA256).decode(),
        "llama_version": ffi.string(lib.llama_version()).decode(),
        "system_info": ffi.string(lib.llama_print_system_info()).decode(),
        "backend_modules": _backends.modules_built(),
        "backends": _backends.backend_names(),
        "cpu_variant": _backends.cpu_variant(cpu_library),
        "cpu_library": cpu_library,
        "devices": _backends.devices(),
    }


def install_as_llama_cpp(force: bool = False) -> bool:
    """Lend llama-ffi the ``llama_cpp`` name in this process: ``import llama_cpp`` and each of
    llama-cpp-python's submodules (``llama_cpp.llama``, ``.llama_types``, ``.llama_chat_format``,
    ...) resolve to ``llama_ffi.llama_cpp``, so code and libraries written for llama-cpp-python run
    unchanged. A real llama-cpp-python, installed or imported, is left alone with a warning unless
    ``force``. Returns whether the name is lent. For programs one cannot edit, set
    ``LLAMA_FFI_AS_LLAMA_CPP=1`` (or ``force``) in their environment."""
    import _llama_ffi_as_llama_cpp

    return _llama_ffi_as_llama_cpp.install(force=force)
