"""``llama_cpp.llama_cpp``: llama-cpp-python's C layer. Its C constants are llama.cpp's own values;
its functions, structs (``llama_batch``), typedefs (``llama_token``) and pointer types
(``llama_batch_p``, ``llama_model_p``) are ``llama_ffi.ctypes_view``'s, derived from the compiled C
API and made on first use; ``_lib`` is libllama as this process loaded it."""

from llama_ffi import lib
from llama_ffi.llama_cpp import not_provided

__all__ = [name for name in dir(lib) if isinstance(getattr(lib, name), int)]
globals().update({name: getattr(lib, name) for name in __all__})


def __getattr__(name: str):
    if name == "_lib":
        from llama_ffi.ctypes_view import libllama

        return libllama()
    return not_provided.missing("llama_cpp", name)
