"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``), which Claude Code
and other agent tools speak: a request becomes the OpenAI chat request it means (system prompt,
turns, images, tools and tool results, stop sequences, thinking), the library answers it, and the
answer goes back in Anthropic's shapes — a ``message``, or the event stream ``message_start`` …
``message_stop`` with text, thinking and ``tool_use`` blocks.

One module a job: ``protocol`` (the bodies), ``convert`` (to a chat request), ``output`` (the
message and its events), ``routes``."""

from llama_ffi.server.anthropic.routes import router

__all__ = ["router"]
