"""``llama-ffi serve`` keeps only the window of a sliding-window model's local layers, as llama-server
does (``--swa-full`` keeps them all, llama.cpp's C default): gemma-3 decoded at half speed at depth
with the full cache and flash attention off. What a client sees: a prompt that extends the cached
one reuses it; one that leaves it before the window's reach is evaluated whole."""

from __future__ import annotations

import httpx
import pytest
from server_process import ServerProcess

pytest.importorskip("fastapi")

N_FIRST, N_EXTEND, N_SHARED = 1600, 64, 100  # gemma-3-270m: a 512-token window in 5 layers of 6
N_VOCAB = 262144  # gemma-3's


def tokens(seed: int, n: int) -> list[int]:
    """``n`` ordinary token ids (clear of the control tokens at either end), a different run for
    each seed: nothing one run caches is a prefix of another."""
    return [(i * 7919 + 104729 * seed + 17) % (N_VOCAB - 1000) + 500 for i in range(n)]


def evaluated(server: ServerProcess, prompt: list[int], n_predict: int) -> int:
    """How many of ``prompt``'s tokens the server evaluated (the rest came from its cache)."""
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": True}
    r = httpx.post(server.url + "/completion", json=body, timeout=300)
    r.raise_for_status()
    return r.json()["timings"]["prompt_n"]


@pytest.mark.parametrize("swa_full", [False, True], ids=["window", "swa-full"])
def test_the_sliding_window_cache_keeps_the_window_unless_swa_full(gemma3_path, swa_full):
    first = tokens(0, N_FIRST)
    flags = ("--swa-full",) if swa_full else ()
    with ServerProcess(gemma3_path, "-c", "4096", "-np", "1", *flags) as server:
        assert evaluated(server, first, 4) == N_FIRST
        # the next turn of a conversation: the cached prompt is reused either way
        assert evaluated(server, first + tokens(1, N_EXTEND), 1) == N_EXTEND
        # a prompt that shares only its first tokens: the window's cache no longer holds what
        # the positions after them attend to, so it is evaluated whole
        other = first[:N_SHARED] + tokens(2, N_FIRST - N_SHARED)
        assert evaluated(server, other, 1) == (N_FIRST - N_SHARED if swa_full else N_FIRST)
