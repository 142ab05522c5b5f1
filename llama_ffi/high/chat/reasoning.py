"""Reasoning: a token budget for the thinking block, and ``reasoning_content`` split from content.

``ReasoningBudget`` is a logits processor with the states of llama.cpp's reasoning-budget
sampler: it waits for the start tag (or starts inside the block when the template already opened
it), counts the tokens of the block, and when the budget runs out forces the budget message and
the end tag, one token at a time, after which it does nothing.
"""

from __future__ import annotations

import copy
import enum

import numpy as np

from llama_ffi.high._checks import integer
from llama_ffi.high.errors import RequestValueError


class State(enum.Enum):
    IDLE = "idle"  # waiting for the start tag
    COUNTING = "counting"  # inside the block, counting its tokens
    FORCING = "forcing"  # budget spent: emitting message + end tag
    DONE = "done"


class ReasoningBudget:
    def __init__(
        self,
        tokenize,
        budget: int,
        start: str = "<think>",
        end: str = "</think>",
        message: str = "",
        start_in_prompt: bool = False,
        start_max_tokens: int | None = None,
    ) -> None:
        integer("reasoning_budget", budget, -1)
        if start_max_tokens is not None:
            integer("reasoning_start_max_tokens", start_max_tokens, 0)
        if not start or not end:
            raise RequestValueError("reasoning_start and reasoning_end must be non-empty")
        self.budget = budget
        self.start, self.end = tokenize(start), tokenize(end)
        self.forced_tokens = tokenize(message + end) if message else list(self.end)
        self.start_max_tokens = start_max_tokens
        self.state = State.COUNTING if start_in_prompt else State.IDLE
        self.seen = None  # history length at the first call: the prompt
        self.count = 0  # tokens inside the block
        self.forced = 0

    def for_choice(self) -> ReasoningBudget:
        """A fresh budget for one choice of a request: each of ``n`` choices thinks on its own."""
        return copy.copy(self)

    def _observe(self, ids: np.ndarray) -> None:
        if self.seen is None:
            self.seen = len(ids)
            return
        generated = len(ids) - self.seen
        tail = ids[-max(len(self.start), len(self.end)) :].tolist()
        if self.state == State.IDLE:
            if tail[-len(self.start) :] == self.start:
                self.state, self.count = State.COUNTING, 0
            elif self.start_max_tokens is not None and generated >= self.start_max_tokens:
                self.state = State.DONE  # no thinking block began in time
        elif self.state == State.COUNTING:
            self.count += 1
            if tail[-len(self.end) :] == self.end:
                self.state = State.DONE
        elif self.state == State.FORCING:
            self.forced += 1
            if self.forced >= len(self.forced_tokens):
                self.state = State.DONE

    def __call__(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        self._observe(ids)
        if self.state == State.COUNTING and self.budget >= 0 and self.count >= self.budget:
            self.state, self.forced = State.FORCING, 0
        if self.state == State.FORCING:
            token = self.forced_tokens[self.forced]
            keep = logits[token]
            logits[:] = -np.inf
            logits[token] = keep if np.isfinite(keep) else 0.0
        return logits


def split_reasoning(
    text: str, start: str = "<think>", end: str = "</think>", started: bool = False
) -> tuple[str | None, str]:
    """(reasoning, content). ``started``: the prompt already opened the block."""
    if not started:
        head, found, rest = text.partition(start)
        if not found or head.strip():
            return None, text
        text = rest
    reasoning, found, content = text.partition(end)
    if not found:
        return (reasoning.strip() or None), ""
    return reasoning.strip(), content.lstrip()
