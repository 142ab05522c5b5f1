"""The engine's running figures: tokens decoded (``Counters``, shared with single-sequence work) and
the steps' totals (``EngineStats``)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Counters:
    evaluated: int = 0  # tokens decoded so far (prefix reuse shows here)


@dataclasses.dataclass
class EngineStats:
    """Running totals of the steps (wall time of batch, decode and sampling): steps that carried
    prompt tokens, and steps of generated tokens only. ``generated_tokens`` counts every token a
    choice took, accepted drafts included."""

    prompt_steps: int = 0
    prompt_tokens: int = 0
    generation_steps: int = 0
    generated_tokens: int = 0
    prompt_s: float = 0.0
    generation_s: float = 0.0
    drafts: int = 0  # drafts verified (llama-server's spec_decode counters)
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0

    embedding_decodes: int = 0  # decodes of embedding inputs, between the steps
    embedded_tokens: int = 0

    def count_embedding(self, n_tokens: int) -> None:
        self.embedding_decodes += 1
        self.embedded_tokens += n_tokens

    def count_draft(self, drafted: int, accepted: int) -> None:
        if drafted:
            self.drafts += 1
            self.draft_tokens += drafted
            self.accepted_draft_tokens += accepted

    @property
    def generation_tps(self) -> float:
        """Aggregate tokens/s of the steps that carried only generated tokens."""
        return self.generated_tokens / self.generation_s if self.generation_s else float("nan")


@dataclasses.dataclass(frozen=True)
class SlotStatus:
    seq: int
    processing: bool  # a choice generates in it, or its prompt is being evaluated
    cached_tokens: int  # positions its part of the KV cache holds


@dataclasses.dataclass(frozen=True)
class EngineStatus:
    """What the outside reads of an engine (``Engine.status()``: the server's ``/slots`` and
    ``/metrics``): its slots, the requests waiting for one, and a copy of the running totals."""

    slots: tuple[SlotStatus, ...]
    waiting: int  # requests submitted and not admitted yet
    stats: EngineStats
    evaluated: int  # tokens decoded so far, single-sequence work included

    @property
    def processing(self) -> int:
        return sum(s.processing for s in self.slots)

    @property
    def idle(self) -> bool:
        """No request in flight: none waiting, none in a slot."""
        return self.waiting == 0 and self.processing == 0
