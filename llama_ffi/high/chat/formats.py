"""Named chat formats through llama.cpp's own built-in template implementation
(``llama_chat_apply_template``), so they move with llama.cpp."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from llama_ffi import ffi, lib
from llama_ffi.high.errors import RequestValueError

# llama-cpp-python's format names that llama.cpp knows under another name
ALIASES = {
    "llama-2": "llama2",
    "llama-3": "llama3",
    "mistral-instruct": "llama2",  # Mistral-Instruct's own template renders as llama.cpp's llama2 (no system)
    "phi-3": "phi3",
    "qwen": "chatml",
    # ChatML with its tools described in the prompt and Hermes-style calls parsed back,
    # which is what create_chat_completion does for any format without tool support
    "chatml-function-calling": "chatml",
}


def builtin_formats() -> list[str]:
    n = lib.llama_chat_builtin_templates(ffi.NULL, 0)
    arr = ffi.new("const char *[]", n)
    lib.llama_chat_builtin_templates(arr, n)
    return sorted(ffi.string(arr[i]).decode() for i in range(n))


def resolve(name: str) -> str:
    known = builtin_formats()
    if name in REGISTERED:
        raise RequestValueError(f"chat_format {name!r} is a registered handler, not one of llama.cpp's formats")
    real = ALIASES.get(name, name)
    if real not in known:
        raise RequestValueError(f"unknown chat_format {name!r}; llama.cpp knows: {', '.join(known)}")
    return real


def format_with_builtin(name: str, messages: list[dict], add_generation_prompt: bool = True) -> str:
    real = resolve(name)
    keep = [
        (ffi.new("char[]", m["role"].encode()), ffi.new("char[]", (m.get("content") or "").encode())) for m in messages
    ]
    chat = ffi.new("struct llama_chat_message[]", len(keep))
    for i, (role, content) in enumerate(keep):
        chat[i].role, chat[i].content = role, content
    size = 1024 + 2 * sum(len(m.get("content") or "") for m in messages)
    buf = ffi.new("char[]", size)
    n = lib.llama_chat_apply_template(real.encode(), chat, len(keep), add_generation_prompt, buf, size)
    if n > size:
        buf = ffi.new("char[]", n)
        n = lib.llama_chat_apply_template(real.encode(), chat, len(keep), add_generation_prompt, buf, n)
    if n < 0:
        raise RequestValueError(f"llama.cpp could not apply the {real!r} format to these messages")
    return ffi.unpack(buf, n).decode("utf-8")


# ---- llama-cpp-python's formatters and chat completion handlers ----------------------------------
@dataclasses.dataclass
class ChatFormatterResponse:
    """What a chat formatter returns: the prompt, the stop strings and criteria that end a reply
    in that format, and whether the prompt already holds the special tokens (BOS)."""

    prompt: str
    stop: str | list[str] | None = None
    stopping_criteria: Any = None
    added_special: bool = False


def is_completion_handler(handler) -> bool:
    """A llama-cpp-python chat completion handler (``handler(llama=..., messages=..., **kwargs)``
    returns the response), as opposed to llama-ffi's prompt renderers (``MTMDChatHandler``, a
    callable returning the prompt text)."""
    if handler is None or not callable(handler):
        return False
    try:
        return "llama" in inspect.signature(handler).parameters
    except (TypeError, ValueError):
        return False


def _as_list(value) -> list:
    if value is None:
        return []
    return [value] if isinstance(value, str) or callable(value) else list(value)


class FormatterChatHandler:
    """A chat completion handler made of a formatter (``formatter(messages=..., **kw)`` returns a
    ``ChatFormatterResponse``): the formatter's prompt is completed by ``create_chat_completion``
    itself, so sampling, ``response_format``, tools and streaming behave as with a model's own
    template, and the formatter's stop strings and criteria end the reply."""

    def __init__(self, formatter: Callable[..., ChatFormatterResponse]) -> None:
        self.formatter = formatter

    def __call__(self, *, llama, messages, **kw):
        return llama.create_chat_completion(messages, **self.completion_options(messages, kw))

    async def acall(self, *, llama, messages, **kw):
        """The same for ``acreate_chat_completion``."""
        return await llama.acreate_chat_completion(messages, **self.completion_options(messages, kw))

    def completion_options(self, messages, kw: dict) -> dict:
        """The call's options with the formatter's prompt (as a prompt renderer) and its stops."""
        chat = {name: kw.pop(name, None) for name in ("functions", "function_call", "tools", "tool_choice")}
        response = self.formatter(messages=messages, **chat)
        stop = _as_list(kw.pop("stop", None)) + _as_list(response.stop)
        criteria = _as_list(kw.pop("stopping_criteria", None)) + _as_list(response.stopping_criteria)
        prompt = response.prompt
        tools = {name: chat[name] for name in ("tools", "tool_choice") if chat[name] is not None}
        return {
            **kw,
            **tools,
            "chat_handler": lambda messages, **_: prompt,
            "stop": stop,
            "stopping_criteria": criteria or None,
        }


# chat_format names registered by llama-cpp-python code (register_chat_format and
# register_chat_completion_handler) -> the completion handler Llama(chat_format=name) uses
REGISTERED: dict[str, Callable] = {}
