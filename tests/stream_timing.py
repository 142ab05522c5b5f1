"""When a stream's chunks reach the caller: one decode apart each, or bunched (several tokens decoded
in one run and handed over together)."""

from __future__ import annotations

import time
from collections.abc import Iterable


def arrivals(chunks: Iterable) -> list[float]:
    """The moment each chunk reached the caller (``time.perf_counter``)."""
    return [time.perf_counter() for _ in chunks]


def assert_token_by_token(arrived: list[float]) -> None:
    """Chunks spaced by one decode each, not bunched: tokens delivered several at a time show as
    most gaps near zero and a long one after them (the median gap far under the mean). From the
    second chunk on: the first follows the prompt's evaluation."""
    gaps = [b - a for a, b in zip(arrived[1:], arrived[2:])]
    assert len(gaps) >= 30, f"{len(gaps) + 2} chunks: too few to judge"
    median, mean = sorted(gaps)[len(gaps) // 2], sum(gaps) / len(gaps)
    assert median >= 0.3 * mean, f"tokens arrive in bursts: median gap {median * 1e3:.2f} ms, mean {mean * 1e3:.2f} ms"
