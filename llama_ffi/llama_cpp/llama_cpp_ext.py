"""``llama_cpp.llama_cpp_ext``: not provided by llama-ffi (every name says what to use instead)."""

from llama_ffi.llama_cpp import not_provided


def __getattr__(name: str):
    return not_provided.missing("llama_cpp_ext", name)
