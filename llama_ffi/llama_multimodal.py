"""The JamePeng fork's ``llama_multimodal`` module name, kept: ``llama_ffi.llama_cpp.llama_multimodal``."""

from llama_ffi.llama_cpp.llama_multimodal import *  # noqa: F403
from llama_ffi.llama_cpp.llama_multimodal import __all__, __getattr__  # noqa: F401
