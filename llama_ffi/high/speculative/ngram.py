"""Model-free drafters: look the last n tokens up in the verified history, draft what followed.

``NgramMapK`` drafts the m tokens after the most recent earlier occurrence of the key n-gram.
When that continuation runs into the present (output repeating with a period shorter than m),
the copy goes on over the drafted tokens themselves, as an LZ77 copy overlaps its own output:
the key then recurs at the end of the draft, so this is the same lookup applied again.
``NgramMapK4V`` counts up to ``max_entries_per_key`` distinct m-gram values after the key and
drafts the most frequent one only when it clearly dominates (at least twice the others together).
Both shorten the draft for a key whose last draft was mostly rejected, so a misleading key costs
little. The index grows incrementally: per new token one dict append.
"""

from __future__ import annotations

from collections import Counter

CHECKED_TAIL = 64  # indexed tokens compared with a new history before extending the index


class NgramIndex:
    """Start positions of every n-gram in a growing token history."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.history: list[int] = []
        self.positions: dict[tuple[int, ...], list[int]] = {}

    def reset(self) -> None:
        self.history = []
        self.positions = {}

    def extend_to(self, history: list[int]) -> None:
        """Index ``history``; it must extend what was indexed before (else start over). Only the
        last ``CHECKED_TAIL`` indexed tokens are compared, so a lookup costs the new tokens, not
        the whole history (comparing and copying 12 k tokens took ~50 µs per token): a choice's
        history only grows, and a rewrite behind an unchanged tail would cost rejected drafts
        (every draft is verified by the model), never wrong text."""
        done = len(self.history)
        tail = min(done, CHECKED_TAIL)
        if len(history) < done or history[done - tail : done] != self.history[done - tail :]:
            self.reset()
            done = 0
        n, positions = self.n, self.positions
        self.history.extend(history[done:])
        for start in range(max(done - n + 1, 0), len(history) - n + 1):
            positions.setdefault(tuple(history[start : start + n]), []).append(start)

    def earlier(self, key: tuple[int, ...]) -> list[int]:
        """Start positions of ``key`` before its occurrence at the end of the history."""
        found = self.positions.get(key, ())
        end = len(self.history) - self.n  # positions grow in order: only the last can be the end's
        return list(found[:-1]) if found and found[-1] >= end else list(found)


class _NgramDrafter:
    # how long a key drafts after a partly rejected draft: "grow" (the engine's: twice what was
    # accepted, plus one) or "accepted" (llama.cpp's common_ngram_map_accept: what was accepted)
    after_rejection = "grow"

    def __init__(self, size_n: int, size_m: int, min_hits: int) -> None:
        self.size_n, self.size_m, self.min_hits = size_n, size_m, min_hits
        self.index = NgramIndex(size_n)
        self.draft_len: dict[tuple[int, ...], int] = {}  # per key: how long to draft next time
        self._last_key: tuple[int, ...] | None = None
        self._last_len = 0

    def draft(self, history: list[int], n_max: int) -> list[int]:
        self._last_key = None
        self.index.extend_to(history)
        if len(history) <= self.size_n or n_max <= 0:
            return []
        key = tuple(history[-self.size_n :])
        earlier = self.index.earlier(key)
        if len(earlier) < self.min_hits:
            return []
        start = self.choose(earlier)
        if start is None:
            return []
        length = min(n_max, self.size_m, self.draft_len.get(key, self.size_m))
        tokens = self.continuation(history, start + self.size_n, length)
        self._last_key, self._last_len = key, len(tokens)
        return tokens

    def choose(self, earlier: list[int]) -> int | None:
        raise NotImplementedError

    def continuation(self, history: list[int], start: int, length: int) -> list[int]:
        return history[start : start + length]

    def accept(self, n_accepted: int) -> None:
        """Feedback: ``n_accepted`` of the last draft were verified. A fully accepted key may
        draft up to m next time; a rejected one as ``after_rejection`` says."""
        if self._last_key is None:
            return
        full = n_accepted >= self._last_len
        partial = n_accepted if self.after_rejection == "accepted" else 2 * n_accepted + 1
        self.draft_len[self._last_key] = self.size_m if full else partial
        self._last_key = None


class NgramMapK(_NgramDrafter):
    """Keys only: the continuation of the most recent earlier occurrence."""

    def choose(self, earlier: list[int]) -> int | None:
        return earlier[-1]

    def continuation(self, history: list[int], start: int, length: int) -> list[int]:
        source = history[start : start + length]  # shorter when it reaches the present: one period
        repeats = -(-length // len(source))
        return (source * repeats)[:length]


class NgramMapK4V(_NgramDrafter):
    """Keys with up to ``max_values`` counted values; drafts only a dominant value."""

    def __init__(self, size_n: int, size_m: int, min_hits: int, max_values: int) -> None:
        super().__init__(size_n, size_m, min_hits)
        self.max_values = max_values

    def choose(self, earlier: list[int]) -> int | None:
        history, n, m = self.index.history, self.size_n, self.size_m
        counts: Counter[tuple[int, ...]] = Counter()
        latest: dict[tuple[int, ...], int] = {}
        for start in reversed(earlier):  # most recent first: they claim the value slots
            if start + n + m > len(history):
                continue  # its value is not complete yet: it cannot be compared
            value = tuple(history[start + n : start + n + m])
            if value not in counts and len(counts) >= self.max_values:
                continue
            counts[value] += 1
            latest.setdefault(value, start)
        if not counts:
            return None
        ((best, top),) = counts.most_common(1)
        others = sum(counts.values()) - top
        if others and top < 2 * others:
            return None  # no value dominates: a draft would likely be rejected
        return latest[best]
