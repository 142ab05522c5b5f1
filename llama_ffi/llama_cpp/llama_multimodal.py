"""The JamePeng fork's multimodal handler names (``from llama_cpp.llama_multimodal import
Qwen3VLChatHandler``): the generic handler,
which renders the model's own template with its media parts, and the families' handlers. A fork
name this package does not provide raises AttributeError naming the alternative."""

from __future__ import annotations

from llama_ffi.high.multimodal.handlers import HANDLERS, missing_handler
from llama_ffi.llama_cpp import not_provided

globals().update(HANDLERS)
__all__ = sorted(HANDLERS)


def __getattr__(name: str):
    if name.endswith("ChatHandler"):
        raise not_provided.NotProvidedError(str(missing_handler(name)))
    return not_provided.missing("llama_multimodal", name)
