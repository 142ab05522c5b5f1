"""Images and audio through llama.cpp's mtmd: the projector context, media parts of chat messages,
and prompts of text and media chunks evaluated into a Llama's context."""

from llama_ffi.high.multimodal.context import MtmdContext
from llama_ffi.high.multimodal.handlers import MTMDChatHandler, unpack_handler
from llama_ffi.high.multimodal.media import Media, extract_media
from llama_ffi.high.multimodal.prompt import MediaPrompt, evaluate

__all__ = ["MTMDChatHandler", "Media", "MediaPrompt", "MtmdContext", "evaluate", "extract_media", "unpack_handler"]
