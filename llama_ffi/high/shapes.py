"""OpenAI's result shapes, in one place for the library and the server: ``text_completion`` (a
whole result, or one chunk of a stream), ``chat.completion`` and its chunks, and ``usage``. The
model's name is passed in by whoever makes the result (a request's ``model=``, else the path)."""

from __future__ import annotations


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def completion_choice(
    index: int, text: str, logprobs: dict | None, finish: str | None, stop_reason: str | None = None
) -> dict:
    """``stop_reason``: the stop string that ended the choice (vLLM's field), once it ended."""
    out = {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}
    if finish is not None:
        out["stop_reason"] = stop_reason
    return out


def completion(cid: str, created: int, model: str, choices: list[dict], usage: dict | None = None) -> dict:
    """A ``text_completion``: the whole result, or a chunk (``usage`` on a stream's last one)."""
    out = {"id": cid, "object": "text_completion", "created": created, "model": model, "choices": choices}
    if usage is not None:
        out["usage"] = usage
    return out


def chat(cid: str, created: int, model: str, choices: list[dict], usage: dict) -> dict:
    """A ``chat.completion``: ``choices`` are {index, message, logprobs, finish_reason}."""
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def chat_chunk(
    cid: str,
    created: int,
    model: str,
    delta: dict,
    finish: str | None,
    index: int = 0,
    stop_reason: str | None = None,
    logprobs: dict | None = None,
) -> dict:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = stop_reason
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [choice]}


def usage_chunk(last: dict, usage: dict) -> dict:
    """OpenAI's closing chunk of a stream whose client asked for usage (``choices: []``)."""
    return {**last, "choices": [], "usage": usage}
