"""``llama_cpp.llama_chat_format``: chat formatters and chat completion handlers.

A formatter turns messages into a ``ChatFormatterResponse`` (prompt, stop strings, criteria);
``Jinja2ChatFormatter`` renders a template in the same sandbox as a model's own template (llama-ffi's
``ChatTemplate``). A chat completion handler (``handler(llama=..., messages=..., **kw)``) answers a
chat call; ``Llama(chat_handler=...)`` and ``Llama(chat_format=NAME)`` (after
``register_chat_format`` / ``register_chat_completion_handler``) use one. The ``format_*``
functions of llama-cpp-python's named formats render through llama.cpp's built-in templates
(``llama_chat_apply_template``) where llama.cpp has that format. The multimodal handlers are
``llama_cpp.llama_multimodal``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from llama_ffi.high.chat import formats
from llama_ffi.high.chat.formats import ChatFormatterResponse, FormatterChatHandler
from llama_ffi.high.chat.templates import ChatTemplate
from llama_ffi.llama_cpp import not_provided
from llama_ffi.llama_cpp.llama import StoppingCriteriaList
from llama_ffi.llama_cpp.llama_multimodal import *  # noqa: F403 - the multimodal handlers, as llama-cpp-python exports them
from llama_ffi.llama_cpp.llama_multimodal import __all__ as _handlers
from llama_ffi.llama_cpp.llama_multimodal import __getattr__ as _multimodal_getattr

logger = logging.getLogger("llama_ffi")

CHATML_BOS_TOKEN = "<s>"
CHATML_EOS_TOKEN = "<|im_end|>"
CHATML_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MISTRAL_INSTRUCT_BOS_TOKEN = "<s>"
MISTRAL_INSTRUCT_EOS_TOKEN = "</s>"
MISTRAL_INSTRUCT_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)
LLAMA3_INSTRUCT_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


class ChatFormatter(Protocol):
    """``formatter(messages=..., **kwargs)`` returns a ``ChatFormatterResponse``."""

    def __call__(self, *, messages: list[dict], **kwargs: Any) -> ChatFormatterResponse: ...


class LlamaChatCompletionHandler(Protocol):
    """``handler(llama=..., messages=..., **kwargs)`` answers a chat call (a dict, or chunks)."""

    def __call__(self, *, llama, messages: list[dict], **kwargs: Any): ...


class Jinja2ChatFormatter:
    """A chat template as a formatter: rendered in llama-ffi's Jinja2 sandbox with ``bos_token``
    and ``eos_token``; the reply stops at ``eos_token`` and, with ``stop_token_ids``, at those
    tokens."""

    def __init__(
        self,
        template: str,
        eos_token: str,
        bos_token: str,
        add_generation_prompt: bool = True,
        stop_token_ids: list[int] | None = None,
    ) -> None:
        self.template = template
        self.eos_token, self.bos_token = eos_token, bos_token
        self.add_generation_prompt = add_generation_prompt
        self.stop_token_ids = set(stop_token_ids) if stop_token_ids is not None else None
        self._template = ChatTemplate(template, "Jinja2ChatFormatter", bos_token=bos_token, eos_token=eos_token)

    def __call__(
        self, *, messages: list[dict], functions=None, function_call=None, tools=None, tool_choice=None, **kwargs
    ) -> ChatFormatterResponse:
        arguments = {"add_generation_prompt": self.add_generation_prompt, **kwargs}
        prompt = self._template.render(
            messages,
            tools=tools,
            functions=functions,
            function_call=function_call,
            tool_choice=tool_choice,
            **arguments,
        )
        criteria = None
        if self.stop_token_ids is not None:
            stop_ids = self.stop_token_ids

            def stop_on_last_token(tokens, logits) -> bool:
                return len(tokens) > 0 and int(tokens[-1]) in stop_ids

            criteria = StoppingCriteriaList([stop_on_last_token])
        # the template wrote the special tokens (BOS) itself: the prompt is tokenized as it is
        return ChatFormatterResponse(
            prompt=prompt, stop=[self.eos_token], stopping_criteria=criteria, added_special=True
        )

    def to_chat_handler(self) -> FormatterChatHandler:
        return chat_formatter_to_chat_completion_handler(self)


def chat_formatter_to_chat_completion_handler(chat_formatter: ChatFormatter) -> FormatterChatHandler:
    return FormatterChatHandler(chat_formatter)


def hf_tokenizer_config_to_chat_formatter(
    tokenizer_config: dict[str, Any], add_generation_prompt: bool = True
) -> Jinja2ChatFormatter:
    """The formatter of a Hugging Face ``tokenizer_config.json`` (its dict): its ``chat_template``,
    ``bos_token`` and ``eos_token``. As llama-cpp-python does, ``add_generation_prompt`` appends an
    empty assistant message (for templates that know no generation prompt)."""
    if not isinstance(tokenizer_config, dict):
        raise TypeError(f"tokenizer_config must be a dict, got {type(tokenizer_config).__name__}")
    for key in ("chat_template", "bos_token", "eos_token"):
        if key not in tokenizer_config:
            raise ValueError(f"the tokenizer config has no {key!r}")

    def token(value) -> str:
        return value["content"] if isinstance(value, dict) else (value or "")

    template = tokenizer_config["chat_template"]
    if isinstance(template, list):  # the named templates form: [{"name": ..., "template": ...}]
        template = next(t["template"] for t in template if t.get("name") == "default")
    formatter = Jinja2ChatFormatter(
        template,
        token(tokenizer_config["eos_token"]),
        token(tokenizer_config["bos_token"]),
        add_generation_prompt=False,
    )
    if not add_generation_prompt:
        return formatter

    class WithEmptyAssistantTurn(Jinja2ChatFormatter):
        def __call__(self, *, messages, **kwargs) -> ChatFormatterResponse:
            response = super().__call__(messages=[*messages, {"role": "assistant", "content": ""}], **kwargs)
            response.stop = [self.eos_token, self.bos_token]
            return response

    return WithEmptyAssistantTurn(template, formatter.eos_token, formatter.bos_token, add_generation_prompt=False)


def hf_tokenizer_config_to_chat_completion_handler(
    tokenizer_config: dict[str, Any], add_generation_prompt: bool = True
) -> FormatterChatHandler:
    return chat_formatter_to_chat_completion_handler(
        hf_tokenizer_config_to_chat_formatter(tokenizer_config, add_generation_prompt=add_generation_prompt)
    )


# ---- the registry of named formats and handlers --------------------------------------------------
class LlamaChatCompletionHandlerNotFoundException(Exception):
    pass


class LlamaChatCompletionHandlerRegistry:
    """The process's named chat completion handlers (``Llama(chat_format=NAME)``)."""

    def register_chat_completion_handler(self, name: str, chat_handler, overwrite: bool = False) -> None:
        if not overwrite and name in formats.REGISTERED:
            raise ValueError(f"a chat completion handler named {name!r} is registered already (overwrite=True)")
        formats.REGISTERED[name] = chat_handler

    def unregister_chat_handler(self, name: str) -> None:
        if name not in formats.REGISTERED:
            raise ValueError(f"no chat completion handler named {name!r} is registered")
        del formats.REGISTERED[name]

    def get_chat_completion_handler_by_name(self, name: str):
        if name in formats.REGISTERED:
            return formats.REGISTERED[name]
        builtin = BUILTIN_FORMATTERS.get(name)
        if builtin is not None:
            return chat_formatter_to_chat_completion_handler(builtin)
        raise LlamaChatCompletionHandlerNotFoundException(f"no chat completion handler named {name!r}")


def get_chat_completion_handler(name: str):
    return LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(name)


def register_chat_completion_handler(name: str):
    """Decorator: ``Llama(chat_format=name)`` answers chat calls with the decorated handler."""

    def decorator(handler):
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, handler, overwrite=True)
        return handler

    return decorator


def register_chat_format(name: str):
    """Decorator: ``Llama(chat_format=name)`` formats chats with the decorated formatter."""

    def decorator(formatter: Callable[..., ChatFormatterResponse]):
        handler = chat_formatter_to_chat_completion_handler(formatter)
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, handler, overwrite=True)
        return formatter

    return decorator


# ---- llama-cpp-python's named formats, through llama.cpp's built-in templates ---------------------
def _builtin(llama_cpp_name: str, stop: str | None) -> Callable[..., ChatFormatterResponse]:
    def formatter(messages: list[dict], **kwargs: Any) -> ChatFormatterResponse:
        text_messages = [{"role": m["role"], "content": _text(m.get("content"))} for m in messages]
        return ChatFormatterResponse(prompt=formats.format_with_builtin(llama_cpp_name, text_messages), stop=stop)

    formatter.__doc__ = f"Messages in llama.cpp's built-in {llama_cpp_name!r} template."
    return formatter


def _text(content) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


format_llama2 = _builtin("llama2", None)
format_llama3 = _builtin("llama3", "<|eot_id|>")
format_llama4 = _builtin("llama4", "<|eot|>")
format_chatml = _builtin("chatml", CHATML_EOS_TOKEN)
format_qwen = _builtin("chatml", CHATML_EOS_TOKEN)
format_mistral_instruct = _builtin("llama2", None)  # Mistral-Instruct's template renders as llama.cpp's llama2
format_zephyr = _builtin("zephyr", "</s>")
format_gemma = _builtin("gemma", "<end_of_turn>")
format_chatglm3 = _builtin("chatglm3", None)
format_openchat = _builtin("openchat", "<|end_of_turn|>")
format_vicuna = _builtin("vicuna", None)

BUILTIN_FORMATTERS = {
    "llama-2": format_llama2,
    "llama-3": format_llama3,
    "llama-4": format_llama4,
    "chatml": format_chatml,
    "qwen": format_qwen,
    "mistral-instruct": format_mistral_instruct,
    "zephyr": format_zephyr,
    "gemma": format_gemma,
    "chatglm3": format_chatglm3,
    "openchat": format_openchat,
    "vicuna": format_vicuna,
}


def guess_chat_format_from_gguf_metadata(metadata: dict[str, str]) -> str | None:
    """The chat_format name of a GGUF's ``tokenizer.chat_template`` when it is one of the known
    templates above; None otherwise (then ``Llama`` uses the model's template itself)."""
    template = metadata.get("tokenizer.chat_template")
    known = {
        CHATML_CHAT_TEMPLATE: "chatml",
        MISTRAL_INSTRUCT_CHAT_TEMPLATE: "mistral-instruct",
        LLAMA3_INSTRUCT_CHAT_TEMPLATE: "llama-3",
    }
    return known.get(template)


__all__ = [
    "BUILTIN_FORMATTERS",
    "CHATML_BOS_TOKEN",
    "CHATML_CHAT_TEMPLATE",
    "CHATML_EOS_TOKEN",
    "ChatFormatter",
    "ChatFormatterResponse",
    "Jinja2ChatFormatter",
    "LLAMA3_INSTRUCT_CHAT_TEMPLATE",
    "LlamaChatCompletionHandler",
    "LlamaChatCompletionHandlerNotFoundException",
    "LlamaChatCompletionHandlerRegistry",
    "MISTRAL_INSTRUCT_BOS_TOKEN",
    "MISTRAL_INSTRUCT_CHAT_TEMPLATE",
    "MISTRAL_INSTRUCT_EOS_TOKEN",
    "chat_formatter_to_chat_completion_handler",
    "get_chat_completion_handler",
    "guess_chat_format_from_gguf_metadata",
    "hf_tokenizer_config_to_chat_completion_handler",
    "hf_tokenizer_config_to_chat_formatter",
    "logger",
    "register_chat_completion_handler",
    "register_chat_format",
    *[name for name in globals() if name.startswith("format_")],
    *_handlers,
]


def __getattr__(name: str):
    if name.endswith("ChatHandler"):  # llama-cpp-python's multimodal handlers live here too
        return _multimodal_getattr(name)
    return not_provided.missing("llama_chat_format", name)
