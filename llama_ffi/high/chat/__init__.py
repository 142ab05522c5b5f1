"""Chat: prompt formatting (model templates in a Jinja2 sandbox, llama.cpp's built-in formats),
message validation, and ``create_chat_completion`` on top of the completion engine."""

from llama_ffi.high.chat.formats import builtin_formats, format_with_builtin
from llama_ffi.high.chat.messages import validate_messages
from llama_ffi.high.chat.templates import ChatTemplate, TemplateError, TemplateSecurityError

__all__ = [
    "ChatTemplate",
    "TemplateError",
    "TemplateSecurityError",
    "builtin_formats",
    "format_with_builtin",
    "validate_messages",
]
