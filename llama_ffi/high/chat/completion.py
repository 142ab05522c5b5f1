"""``create_chat_completion``: messages → prompt (handler, named format, the model's template, or
the ChatML fallback) → the completion engine → OpenAI ``chat.completion`` shapes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

from llama_ffi import ffi, lib
from llama_ffi.high.chat.formats import format_with_builtin
from llama_ffi.high.chat.messages import validate_messages
from llama_ffi.high.chat.templates import ChatTemplate
from llama_ffi.high.grammar import LlamaGrammar

FALLBACK_FORMAT = "chatml"  # used when the model has no template and none is given

# Any JSON value at the top is an object (OpenAI's json_object mode); whitespace is bounded so a
# model cannot loop on it.
JSON_OBJECT_GBNF = r'''
root    ::= object
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" sp ( member ( "," sp member )* )? sp "}"
member  ::= string sp ":" sp value
array   ::= "[" sp ( value ( "," sp value )* )? sp "]"
string  ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
sp      ::= [ \t\n]{0,8}
'''


def model_template(llm, name: str | None) -> ChatTemplate | None:
    ptr = lib.llama_model_chat_template(llm._model.ptr, name.encode() if name else ffi.NULL)
    if ptr == ffi.NULL:
        if name:
            raise ValueError(f"the model has no chat template named {name!r}")
        return None
    vocab = llm._model.vocab_ptr
    special = lambda t: llm.tokenizer.piece(t, special=True).decode("utf-8", "replace") if t >= 0 else ""
    return ChatTemplate(ffi.string(ptr).decode("utf-8"), name or "tokenizer.chat_template",
                        bos_token=special(lib.llama_vocab_bos(vocab)), eos_token=special(lib.llama_vocab_eos(vocab)))


def render_prompt(llm, messages: list[dict], *, chat_handler: Callable | None = None,
                  chat_format: str | None = None, chat_template_name: str | None = None,
                  extra_template_arguments: dict | None = None, assistant_prefill: bool = False) -> str:
    if assistant_prefill:
        # The history up to the last (partial) assistant message, rendered as if asking for a
        # reply, then that partial text appended: the model continues it, no end-of-turn between.
        if messages[-1]["role"] != "assistant":
            raise ValueError("assistant_prefill=True needs the last message to be the assistant's")
        head = render_prompt(llm, messages[:-1], chat_handler=chat_handler, chat_format=chat_format,
                             chat_template_name=chat_template_name,
                             extra_template_arguments=extra_template_arguments)
        return head + (messages[-1].get("content") or "")
    if chat_handler is not None:
        return chat_handler(messages=messages, **(extra_template_arguments or {}))
    if chat_format is not None:
        return format_with_builtin(chat_format, messages)
    template = model_template(llm, chat_template_name)
    if template is None:
        return format_with_builtin(FALLBACK_FORMAT, messages)
    return template.render(messages, add_generation_prompt=True, **(extra_template_arguments or {}))


def response_grammar(response_format: dict | None) -> LlamaGrammar | None:
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or response_format.get("type") not in ("text", "json_object", "json_schema"):
        raise ValueError(f"response_format must be {{'type': 'text'|'json_object'|'json_schema'}}, got {response_format!r}")
    if response_format["type"] == "text":
        return None
    if response_format.get("schema") or response_format["type"] == "json_schema":
        raise NotImplementedError("response_format with a JSON Schema is not implemented yet; "
                                  "use {'type': 'json_object'} or a LlamaGrammar")
    return LlamaGrammar.from_string(JSON_OBJECT_GBNF)


def _chunk(cid: str, created: int, model: str, delta: dict, finish: str | None) -> dict:
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def create_chat_completion(llm, messages, *, chat_handler=None, chat_format=None,
                           chat_template_name=None, extra_template_arguments=None,
                           response_format=None, stream: bool = False, max_tokens: int | None = None,
                           assistant_prefill: bool = False, **completion_kwargs):
    messages = validate_messages(messages)
    prompt = render_prompt(llm, messages, chat_handler=chat_handler, chat_format=chat_format,
                           chat_template_name=chat_template_name,
                           extra_template_arguments=extra_template_arguments,
                           assistant_prefill=assistant_prefill)
    grammar = response_grammar(response_format)
    if grammar is not None:
        completion_kwargs["grammar"] = grammar
    bos_text = llm.tokenizer.piece(llm.token_bos(), special=True) if llm.token_bos() >= 0 else b""
    add_bos = bool(lib.llama_vocab_get_add_bos(llm._model.vocab_ptr)) and not (
        bos_text and prompt.encode().startswith(bos_text))
    tokens = llm.tokenize(prompt, add_bos=add_bos, special=True)
    result = llm.create_completion(tokens, max_tokens=max_tokens, stream=stream, **completion_kwargs)
    cid, created = f"chatcmpl-{uuid.uuid4()}", int(time.time())
    if not stream:
        choice = result["choices"][0]
        return {"id": cid, "object": "chat.completion", "created": created, "model": result["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": choice["text"]},
                             "logprobs": choice["logprobs"], "finish_reason": choice["finish_reason"]}],
                "usage": result["usage"]}

    def chunks() -> Iterator[dict]:
        model = llm.model_path
        yield _chunk(cid, created, model, {"role": "assistant"}, None)
        for c in result:
            choice = c["choices"][0]
            if choice["text"]:
                yield _chunk(cid, created, model, {"content": choice["text"]}, None)
            if choice["finish_reason"] is not None:
                yield _chunk(cid, created, model, {}, choice["finish_reason"])

    return chunks()
