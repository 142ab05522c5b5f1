"""llama-cpp-python's ``llama_chat_format`` module name, kept: ``llama_ffi.llama_cpp.llama_chat_format``
(chat formatters, handlers, and the multimodal chat handlers)."""

from llama_ffi.llama_cpp.llama_chat_format import *  # noqa: F403
from llama_ffi.llama_cpp.llama_chat_format import __all__, __getattr__  # noqa: F401
