"""The JamePeng fork's multimodal handler names (``from llama_cpp.llama_multimodal import
Qwen3VLChatHandler`` becomes ``from llama_ffi.llama_multimodal import ...``): the generic handler,
which renders the model's own template with its media parts, and the families' handlers. A fork
name this package does not provide raises AttributeError naming the alternative."""

from __future__ import annotations

from llama_ffi.high.multimodal.handlers import HANDLERS, missing_handler

globals().update(HANDLERS)
__all__ = sorted(HANDLERS)


def __getattr__(name: str):
    if name.endswith("ChatHandler"):
        raise missing_handler(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
