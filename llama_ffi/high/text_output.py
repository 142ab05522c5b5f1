"""Per-token text output of a generating sequence: the events it yields, stop strings matched on
decoded text (text that could still become a stop string is held back, so a stop string never
leaks into the output, also when it spans several tokens), and log-probabilities in OpenAI's
``logprobs`` shape."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Event:
    """One generated token: its id, the text it releases (may be ""), and its logprob data."""

    token: int
    text: str
    logprob: float | None = None
    top_logprobs: dict[str, float] | None = None
    top: list[tuple[int, float]] | None = None  # the same, by token id (llama-server's shape)


class StopMatcher:
    """Finds stop strings in streamed text; releases only text that cannot start one."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.pending = ""
        self.matched: str | None = None  # the stop string found, once found

    def feed(self, text: str) -> tuple[str, bool]:
        """(text safe to emit now, whether a stop string was found)."""
        if not self.stops:
            return text, False
        self.pending += text
        cut = min((i for i in (self.pending.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.matched = next(s for s in self.stops if self.pending.find(s) == cut)
            out, self.pending = self.pending[:cut], ""
            return out, True
        hold = 0
        for s in self.stops:  # longest suffix of pending that is a prefix of a stop string
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        out = self.pending[: len(self.pending) - hold] if hold else self.pending
        self.pending = self.pending[len(out) :]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def top_tokens(logprobs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The ``n`` most probable tokens and their log-probabilities, most probable first."""
    if n <= 0:
        return []
    idx = np.argpartition(-logprobs, n - 1)[:n]
    idx = idx[np.argsort(-logprobs[idx])]
    return [(int(i), float(logprobs[i])) for i in idx]


def logprobs_block(events: list[Event], offset: int, tokenizer) -> dict:
    tokens, offsets, lps, tops = [], [], [], []
    pos = offset
    for e in events:
        if e.token < 0:
            continue
        text = tokenizer.piece(e.token).decode("utf-8", "replace")
        tokens.append(text)
        offsets.append(pos)
        pos += len(text)
        lps.append(e.logprob)
        tops.append(e.top_logprobs)
    return {"tokens": tokens, "text_offset": offsets, "token_logprobs": lps, "top_logprobs": tops}
