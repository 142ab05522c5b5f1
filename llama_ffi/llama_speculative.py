"""The JamePeng fork's ``llama_speculative`` module name, kept: ``llama_ffi.llama_cpp.llama_speculative``."""

from llama_ffi.llama_cpp.llama_speculative import *  # noqa: F403
from llama_ffi.llama_cpp.llama_speculative import __all__  # noqa: F401
