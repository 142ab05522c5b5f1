"""llama-cpp-python's seeds: one chain per ``Llama``.

``Llama(seed=s)`` or ``set_seed(s)`` starts a chain; every request without a seed of its own takes
the next link (a seed drawn from the previous one), so call after call samples differently while a
program run twice samples the same. A request's own ``seed`` restarts the chain there. ``save_state``
records where the chain stands and ``load_state`` puts it back. The random seed (-1, or llama.cpp's
``LLAMA_DEFAULT_SEED``) is no chain: each request then samples with a fresh random seed.
"""

from __future__ import annotations

import random
import threading

from llama_ffi import lib
from llama_ffi.high.errors import RequestValueError

RANDOM_SEED = -1  # llama-cpp-python's spelling of llama.cpp's LLAMA_DEFAULT_SEED


def checked_seed(seed: int) -> int:
    """A seed argument as llama.cpp's seed (-1: LLAMA_DEFAULT_SEED, a random one)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not -1 <= seed <= 0xFFFFFFFF:
        raise RequestValueError(f"seed must be an int in 0..0xFFFFFFFF (or -1: random), got {seed!r}")
    return lib.LLAMA_DEFAULT_SEED if seed == RANDOM_SEED else seed


class SeedChain:
    """Where one Llama's chain stands; safe to advance from many threads."""

    def __init__(self, seed: int) -> None:
        self._lock = threading.Lock()
        self.current = checked_seed(seed)

    def restart(self, seed: int) -> None:
        self.current = checked_seed(seed)

    def next(self, seed: int | None = None) -> int:
        """The seed a request samples with: its own (which restarts the chain), else the next link."""
        with self._lock:
            if seed is not None:
                self.current = checked_seed(seed)
            elif self.current != lib.LLAMA_DEFAULT_SEED:
                # randrange stops short of LLAMA_DEFAULT_SEED, which would mean "random"
                self.current = random.Random(self.current).randrange(lib.LLAMA_DEFAULT_SEED)
            return self.current
