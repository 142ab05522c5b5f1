"""``llama_cpp.mtmd_cpp``: the C layer of libmtmd, as ``llama_cpp.llama_cpp`` is llama.h's;
``_libmtmd`` is libmtmd as this process loaded it."""

from llama_ffi.llama_cpp import not_provided
from llama_ffi.llama_cpp.llama_cpp import *  # noqa: F403 - mtmd's constants live in the same cffi module
from llama_ffi.llama_cpp.llama_cpp import __all__  # noqa: F401


def __getattr__(name: str):
    if name == "_libmtmd":
        from llama_ffi.ctypes_view import loaded_libraries

        return next(library for library in loaded_libraries() if "mtmd" in library._name)
    return not_provided.missing("mtmd_cpp", name)
