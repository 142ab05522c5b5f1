"""``llama_cpp.llama_cpp``: llama-cpp-python's C layer. Every C constant (enum values, ``#define``
numbers) is llama.cpp's own, from the compiled cffi module; a C function or ctypes type answers
``NotProvidedError`` naming ``llama_ffi.lib``'s function of the same C API (``not_provided.c_name``)."""

from llama_ffi import lib
from llama_ffi.llama_cpp import not_provided

__all__ = [name for name in dir(lib) if isinstance(getattr(lib, name), int)]
globals().update({name: getattr(lib, name) for name in __all__})


def __getattr__(name: str):
    return not_provided.missing("llama_cpp", name)
