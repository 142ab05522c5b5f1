"""``llama_cpp._internals``: llama-cpp-python's ctypes wrappers of the C objects. llama-ffi's owners
of the same objects are ``llama_ffi.high.Model`` and ``Context``; the ctypes classes are refused
with that alternative."""

from llama_ffi.llama_cpp import not_provided


def __getattr__(name: str):
    return not_provided.missing("_internals", name)
