"""``llama_cpp.server``: llama-cpp-python's server. llama-ffi's is ``llama-ffi serve``."""

from llama_ffi.llama_cpp import not_provided


def __getattr__(name: str):
    return not_provided.missing("server", name)
