"""Named chat formats through llama.cpp's own built-in template implementation
(``llama_chat_apply_template``), so they move with llama.cpp."""

from __future__ import annotations

from llama_ffi import ffi, lib
from llama_ffi.high.errors import RequestValueError

# llama-cpp-python's format names that llama.cpp knows under another name
ALIASES = {
    "llama-2": "llama2",
    "llama-3": "llama3",
    "mistral-instruct": "mistral-v1",
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
