"""llama-server's own completion API: ``POST /completion`` (and ``/completions`` without ``/v1``),
with its request fields (``prompt`` as text, tokens, a mix of both or a list of prompts; ``n_probs``,
``return_tokens``, ``response_fields``...) and its response: ``content``, ``tokens``, ``stop``,
``stop_type``, ``timings``, ``generation_settings``, ``completion_probabilities``; a stream sends
one such object per token, then the final one."""

from __future__ import annotations

import dataclasses
import math
from contextlib import aclosing
from typing import Any

from pydantic import StrictBool, StrictInt

from llama_ffi.high.engine import results
from llama_ffi.high.engine.progress import PromptProgress
from llama_ffi.server.errors import sse_error
from llama_ffi.server.schemas import Sampling
from llama_ffi.server.streaming import Clock, event, progress_timings


class NativeRequest(Sampling):
    prompt: Any = None
    content: Any = None  # llama-server's older name of prompt
    n_probs: StrictInt = 0
    return_tokens: StrictBool = False
    post_sampling_probs: StrictBool = False
    response_fields: list[str] | None = None
    json_schema: dict[str, Any] | None = None


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def token_json(llm, token: int, logprob: float, as_prob: bool) -> dict:
    piece = llm.tokenizer.piece(token).decode("utf-8", "replace")
    value = {"prob": math.exp(logprob)} if as_prob else {"logprob": logprob}
    return {"id": token, "token": piece, "bytes": list(piece.encode("utf-8")), **value}


def probabilities(llm, event_, as_prob: bool) -> dict:
    """``post_sampling_probs`` asks for probabilities instead of log-probabilities (here those of
    the model's distribution before the sampler chain; tokens of probability 0 left out)."""
    top = [token_json(llm, t, v, as_prob) for t, v in event_.top or [] if not as_prob or math.exp(v) > 0.0]
    return {**token_json(llm, event_.token, event_.logprob, as_prob), ("top_probs" if as_prob else "top_logprobs"): top}


def stop_type(choice) -> str:
    if choice.finish_reason == "length":
        return "limit"
    if choice.matcher.matched is not None:
        return "word"
    return "eos" if choice.finish_reason == "stop" else "none"


def settings_json(settings, n_predict: int | None) -> dict:
    sampling = dataclasses.asdict(settings.sampling)
    # llama-server's shape; a ban (-inf) is null, as JSON has no infinity
    sampling["logit_bias"] = [
        {"bias": b if math.isfinite(b) else None, "token": t} for t, b in (settings.sampling.logit_bias or {}).items()
    ]
    sampling["dry_sequence_breakers"] = list(sampling["dry_sequence_breakers"])
    return {"n_predict": -1 if n_predict is None else n_predict, "stop": settings.stop, **sampling}


def final(llm, call_, choice, body: NativeRequest, model: str, clock: Clock, streamed: bool) -> dict:
    group = next(g for g in call_.request.groups if choice in g.choices)
    text = "".join(e.text for e in choice.events)
    n_prompt = len(group.prompt)
    out = {
        "index": choice.index,
        "content": "" if streamed else text,
        "tokens": [e.token for e in choice.events if e.token >= 0] if body.return_tokens and not streamed else [],
        "id_slot": body.id_slot,
        "stop": True,
        "model": model,
        "tokens_predicted": choice.produced,
        "tokens_evaluated": n_prompt,
        "generation_settings": settings_json(call_.settings, call_.settings.max_tokens),
        "prompt": llm.detokenize(list(group.prompt)).decode("utf-8", "replace"),
        "has_new_line": "\n" in text,
        "truncated": False,
        "stop_type": stop_type(choice),
        "stopping_word": choice.matcher.matched or "",
        "tokens_cached": n_prompt + choice.produced,
        "timings": clock.timings(n_prompt, choice.produced, group.cached, choice.first_token_at),
    }
    if body.n_probs and not streamed:
        out["completion_probabilities"] = [
            probabilities(llm, e, body.post_sampling_probs) for e in choice.events if e.token >= 0
        ]
    return pick(out, body.response_fields)


def pick(result: dict, fields: list[str] | None) -> dict:
    """llama-server's ``response_fields``: only those (a "a/b" path is taken out of its parent)."""
    if not fields:
        return result
    out = {}
    for field in fields:
        value: Any = result
        for part in field.split("/"):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            out[field.split("/")[-1] if "/" in field else field] = value
    return out


async def drain(call_, clock: Clock) -> None:
    async for _ in results.aitems(call_):
        clock.tick()


async def events(llm, call_, body: NativeRequest, model: str, clock: Clock):
    produced: dict[int, int] = {}
    n_prompt = {c.index: len(g.prompt) for g in call_.request.groups for c in g.choices}
    try:
        async with aclosing(results.aitems(call_)) as items:
            async for item in items:
                if isinstance(item, PromptProgress):  # before the first token: the clock does not start
                    out = {"index": 0, "content": "", "tokens": [], "stop": False, "prompt_progress": item.as_dict()}
                    if body.timings_per_token:
                        out["timings"] = progress_timings(out["prompt_progress"])
                    yield event(out)
                    continue
                index, ev = item
                clock.tick()
                if ev is None:
                    choice = next(c for c in call_.choices if c.index == index)
                    yield event(final(llm, call_, choice, body, model, clock, True))
                    continue
                produced[index] = produced.get(index, 0) + (ev.token >= 0)
                chunk = {
                    "index": index,
                    "content": ev.text,
                    "tokens": [ev.token] if ev.token >= 0 else [],
                    "stop": False,
                    "id_slot": body.id_slot,
                    "tokens_predicted": produced[index],
                    "tokens_evaluated": n_prompt[index],
                }
                if body.n_probs and ev.token >= 0:
                    chunk["completion_probabilities"] = [probabilities(llm, ev, body.post_sampling_probs)]
                yield event(chunk)
    except Exception as error:  # noqa: BLE001 - the client sees it as an event
        yield sse_error(error)
