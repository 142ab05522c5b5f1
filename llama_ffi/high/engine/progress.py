"""Prompt progress (llama-server's ``return_progress``): a streamed request that asks for it is told,
when its prompt gets a slot and after every decode of its prompt's tokens, how far the evaluation
is. Items of its channel between the tokens; the stream turns each into a chunk."""

from __future__ import annotations

import dataclasses
import time

from llama_ffi.high.engine.choices import Group, kv_cells


@dataclasses.dataclass(frozen=True)
class PromptProgress:
    total: int  # the prompt's tokens
    cache: int  # of them, those the slot already held
    processed: int  # of them, those in the slot now (cached ones included)
    time_ms: float  # since the prompt got its slot

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def report(group: Group, processed: int | None = None) -> None:
    """Tell ``group``'s request how far its prompt is (``processed``: default its evaluated part)."""
    request = group.request
    if not (request.streamed and request.progress):
        return
    now = time.perf_counter()
    if group.admitted_at is None:
        group.admitted_at = now
    done = group.evaluated if processed is None else processed
    request.channel.put(PromptProgress(kv_cells(group.prompt), group.cached, done, (now - group.admitted_at) * 1e3))
