"""A prompt cache with ``n`` siblings under threads: every choice answers from the cells of its own
prompt. With separate pools of cells (``kv_unified=False``, llama.cpp's default when ``n_seq_max``
is given), llama.cpp's ``seq_cp`` only queues the copy of a pool for the next decode; a sibling's
state stored or restored before then held another prompt's cells, and 13 of 209 answers were
another question's (issue 41)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_engine import run_threads

from llama_ffi.high import Llama, LlamaDiskCache
from llama_ffi.high.batch import Batch
from llama_ffi.testing import assert_same_or_near_tie, logits_gap, parallel_bound

PREAMBLES = [
    "The museum opens at nine and closes at five. Tickets are sold at the entrance hall.",
    "Our bakery uses flour, water, salt and yeast. Dough rests overnight before baking.",
    "The train leaves platform four every hour. Passengers must validate tickets before boarding.",
    "The library lends books for three weeks. Late returns cost ten cents a day.",
    "The park has a lake, two playgrounds and a cafe. Dogs must be kept on a leash.",
    "The hospital visiting hours are from two to eight. Flowers are not allowed in the wards.",
]
QUESTIONS = ["what should a visitor do first?", "what is the most common mistake?"]
PROMPTS = [f"{p}\nQuestion: {q}\nAnswer:" for p in PREAMBLES for q in QUESTIONS]
GREEDY = dict(max_tokens=32, temperature=0.0)


@pytest.fixture(scope="module")
def separate_pools(smollm2_path):
    with Llama(smollm2_path, n_ctx=4096, n_seq_max=4, n_threads=2, progress=False) as llm:
        assert llm.context.n_ctx_seq < llm.context.n_ctx  # one pool of cells per sequence
        yield llm


def test_a_copied_sequence_holds_its_source_at_once(separate_pools):
    """The copy is there before any decode: its state, saved and restored into a third sequence,
    gives the source's logits (not the pool's old cells: another question's)."""
    ctx = separate_pools.context
    asked, other = (separate_pools.tokenize(PROMPTS[k]) for k in (0, 1))
    n = len(asked)
    separate_pools.reset()
    batch = Batch(512)

    def copy_and_decode() -> tuple[np.ndarray, np.ndarray]:
        ctx.decode(batch.fill(other, 0, 1).c)  # what sequence 1's pool held before
        ctx.decode(batch.fill(asked, 0, 0).c)
        want = ctx.logits().copy()
        ctx.copy_sequence(0, 1)
        saved = ctx.seq_state_bytes(1)
        ctx.set_seq_state_bytes(2, saved)
        ctx.seq_rm(2, n - 1)
        ctx.decode(batch.fill(asked[n - 1 :], n - 1, 2).c)
        return want, ctx.logits().copy()

    want, got = separate_pools.run_on_context(copy_and_decode, idle=True)
    batch.close()
    separate_pools.reset()
    # the last token decoded alone against within the prompt's batch: at most this machine's gap
    assert float(np.abs(got - want).max()) < 2 * logits_gap(separate_pools) + 0.05


def test_n_siblings_with_a_disk_cache_under_threads_answer_their_own_prompt(separate_pools, tmp_path):
    llm = separate_pools
    llm.reset()
    alone = {p: llm(p, **GREEDY)["choices"][0]["text"] for p in PROMPTS}
    llm.set_cache(LlamaDiskCache(tmp_path, capacity_bytes=24 << 20))
    answers: list[tuple[str, str]] = []

    def caller(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(24):
            prompt = rng.choice(PROMPTS)
            out = llm(prompt, n=rng.choice([1, 2]), **GREEDY)
            answers.extend((prompt, c["text"]) for c in out["choices"])

    try:
        run_threads([lambda s=s: caller(s) for s in range(3)])
    finally:
        llm.set_cache(None)
    assert len(answers) > 72
    bound = parallel_bound(llm)
    differing = {(p, t) for p, t in answers if t != alone[p]}
    for prompt, text in sorted(differing):  # a batch's rounding may flip a near tie, nothing more
        assert_same_or_near_tie(llm, prompt, text, 32, limit=bound)
