"""``llama_cpp.mtmd_cpp``: the C layer of libmtmd, as ``llama_cpp.llama_cpp`` is llama.h's."""

from llama_ffi.llama_cpp import not_provided
from llama_ffi.llama_cpp.llama_cpp import *  # noqa: F403
from llama_ffi.llama_cpp.llama_cpp import __all__  # noqa: F401 - mtmd's constants live in the same cffi module


def __getattr__(name: str):
    return not_provided.missing("mtmd_cpp", name)
