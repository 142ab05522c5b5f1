"""The callers' side of a completion: a request handed to the engine's loop, waited for in a thread or in
asyncio, shaped as OpenAI's ``text_completion`` (a dict, or chunks with ``stream=True``).

``choices[p * n + k]`` answers prompt ``p`` (its k-th sample). A stream's chunks each carry one
choice's text; the last chunk of every choice has its ``finish_reason``, the very last the usage.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import aclosing

from llama_ffi.high import shapes
from llama_ffi.high.completion import prepare
from llama_ffi.high.engine.choices import build_groups
from llama_ffi.high.engine.progress import PromptProgress
from llama_ffi.high.engine.request import DONE, Request
from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.text_output import logprobs_block


class Call:
    """One completion call: its request and how its results are shaped."""

    def __init__(
        self,
        llm,
        prompts: list,
        n: int,
        settings,
        echo_texts: Sequence[str],
        model_name: str,
        streamed: bool,
        progress: bool = False,
        slot_id: int | None = None,
    ) -> None:
        ctx = llm.context
        self.engine = llm.engine
        self.tokenizer = llm.tokenizer
        self.n, self.echo_texts, self.model_name = n, list(echo_texts), model_name
        self.settings = settings
        groups = build_groups(ctx, prompts, n, settings, ctx.n_seq_max, ctx.n_ctx_seq)
        if slot_id is not None and slot_id != -1:  # llama-server's id_slot (-1: any)
            if isinstance(slot_id, bool) or not isinstance(slot_id, int) or not 0 <= slot_id < ctx.n_seq_max:
                raise RequestValueError(
                    f"slot_id must be -1 or a slot of this Llama (0..{ctx.n_seq_max - 1}), got {slot_id!r}"
                )
            if len(groups) > 1:
                raise RequestValueError("slot_id pins one prompt to a slot: give one prompt")
        else:
            slot_id = None
        self.request = Request(
            groups, settings, streamed, self.engine.wake, progress=streamed and progress, slot_id=slot_id
        )
        self.choices = sorted(self.request.choices, key=lambda c: c.index)
        self.n_prompt = sum(len(p) for p in prompts)
        self.cid, self.created = f"cmpl-{uuid.uuid4()}", int(time.time())

    def usage(self) -> dict:
        produced = sum(c.produced for c in self.choices)
        # A prompt counts once (as in prompt_tokens), through the group of its first choice.
        cached = sum(g.cached for g in self.request.groups if g.choices[0].index % self.n == 0)
        return shapes.usage(self.n_prompt, produced, cached)

    def shell(self, items: list[dict], with_usage: bool) -> dict:
        return shapes.completion(self.cid, self.created, self.model_name, items, self.usage() if with_usage else None)

    def _logprobs(self, events, offset: int = 0) -> dict | None:
        return logprobs_block(events, offset, self.tokenizer) if self.settings.logprobs is not None else None

    def result(self) -> dict:
        items = []
        for c in self.choices:
            echo = self.echo_texts[c.index // self.n]
            items.append(
                shapes.completion_choice(
                    c.index,
                    echo + "".join(e.text for e in c.events),
                    self._logprobs(c.events, len(echo)),
                    c.finish_reason,
                    c.matcher.matched,
                )
            )
        return self.shell(items, True)

    def echo_chunks(self) -> Iterator[dict]:
        for c in self.choices:
            echo = self.echo_texts[c.index // self.n]
            if echo:
                yield self.shell([shapes.completion_choice(c.index, echo, None, None)], False)

    def shows(self, item) -> bool:
        """A stream carries every token (so a closed one knows what its caller saw); a chunk is
        made of those with text or logprobs, and of every choice's end."""
        if isinstance(item, PromptProgress):
            return True
        event = item[1]
        return event is None or bool(event.text) or self.settings.logprobs is not None

    def chunk(self, item, left: int) -> dict:
        if isinstance(item, PromptProgress):  # llama-server's shape: no choices, the progress
            return {**self.shell([], False), "prompt_progress": item.as_dict()}
        index, event = item
        if event is None:
            choice = next(c for c in self.choices if c.index == index)
            return self.shell(
                [shapes.completion_choice(index, "", None, choice.finish_reason, choice.matcher.matched)], left == 0
            )
        return self.shell([shapes.completion_choice(index, event.text, self._logprobs([event]), None)], False)


def _ends_a_choice(item) -> bool:
    return isinstance(item, tuple) and item[1] is None


def _raise_if_error(item) -> None:
    if isinstance(item, BaseException):
        raise item


def wait(call: Call) -> None:
    """Submit the call's request and wait for its end in this thread (Ctrl-C, or any exception a
    signal handler raises meanwhile, cancels it)."""
    engine, request = call.engine, call.request
    engine.submit(request)
    try:
        while True:
            item = engine.next_item(request)
            if item is DONE:
                return
            _raise_if_error(item)
    except BaseException:
        engine.cancel(request)
        raise


def items(call: Call) -> Iterator[tuple]:
    """The streamed items ``(choice index, event or None)``; closing the iterator cancels the request."""
    engine, request = call.engine, call.request
    engine.submit(request)
    try:
        while True:
            item = engine.next_item(request)
            if item is DONE:
                return
            _raise_if_error(item)
            yield item
    finally:
        if not request.finished:
            engine.cancel(request)


async def aitems(call: Call) -> AsyncIterator[tuple]:
    engine, request = call.engine, call.request
    engine.submit(request)
    try:
        while True:
            item = await request.channel.aget()
            if item is DONE:
                return
            _raise_if_error(item)
            yield item
    finally:
        if not request.finished:  # freed at the loop's next turn: never wait here
            engine.cancel(request, wait=False)


def completion(call: Call):
    """The dict, or with a streamed request an iterator of chunks."""
    if call.request.streamed:
        return _chunks(call)
    wait(call)
    return call.result()


def _chunks(call: Call) -> Iterator[dict]:
    yield from call.echo_chunks()
    left = len(call.choices)
    for item in items(call):
        left -= _ends_a_choice(item)
        if call.shows(item):
            yield call.chunk(item, left)


async def acompletion(call: Call):
    if call.request.streamed:
        return _achunks(call)
    async for _ in aitems(call):
        pass
    return call.result()


async def _achunks(call: Call) -> AsyncIterator[dict]:
    for chunk in call.echo_chunks():
        yield chunk
    left = len(call.choices)
    async with aclosing(aitems(call)) as request_items:  # closed with this stream: the slot is freed
        async for item in request_items:
            left -= _ends_a_choice(item)
            if call.shows(item):
                yield call.chunk(item, left)


def tokens(call: Call) -> Iterator[int]:
    """``Llama.generate``: the sampled tokens of a one-choice streamed request."""
    for _, event in items(call):
        if event is not None and event.token >= 0:
            yield event.token


def call_of(llm, prompt, request) -> Call:
    """The engine's call for a typed request (``high.request``), checked before any decoding."""
    return Call(llm, *prepare(llm, prompt, request), request.stream, request.progress, request.slot_id)


def complete(llm, prompt, request):
    """A completion of ``prompt`` for the typed ``request``: its dict, or its chunks when streamed."""
    return completion(call_of(llm, prompt, request))


async def acomplete(llm, prompt, request):
    """``complete`` for asyncio."""
    return await acompletion(call_of(llm, prompt, request))
