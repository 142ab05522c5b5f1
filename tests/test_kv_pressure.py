"""KV pressure: more concurrent work than the cache holds. The engine admits a request only when
its prompt and its whole token budget fit beside what running requests may still fill, so what it
admits always runs to the end; the others wait in arrival order (none starves), and no request
fails with a decode error. A request whose budget is larger than a sequence can ever hold ends
with ``finish_reason == "length"`` at the context's end, and the log says so."""

from __future__ import annotations

import logging

from test_engine import run_threads

from llama_ffi.high import Llama
from llama_ffi.testing import assert_same_or_near_tie, parallel_bound

GREEDY = {"temperature": 0.0}
SUBJECTS = [
    "the sea",
    "a mountain",
    "the city",
    "a forest",
    "the desert",
    "a river",
    "the moon",
    "an old house",
    "a train",
    "the market",
    "a garden",
    "the winter",
    "a library",
    "the harbour",
    "a storm",
    "the bridge",
]


def prompt_of(subject: str) -> str:
    return f"Write a long and detailed story about {subject}, with many characters and places. Begin:"


def test_sixteen_requests_over_the_cells_all_finish_with_their_own_answers(smollm2_path):
    n_tokens = 64
    with Llama(smollm2_path, n_ctx=512, n_threads=2, progress=False) as llm:  # 8 slots, one pool of cells
        ban = {llm.token_eos(): -float("inf")}  # every request wants its whole budget
        prompts = [prompt_of(s) for s in SUBJECTS]
        needed = sum(len(llm.tokenize(p)) + n_tokens for p in prompts)
        assert needed > 2 * llm.context.n_ctx  # over twice the cells there are
        most_at_once = [0]
        engine = llm.engine

        def watch(ids, logits):
            most_at_once[0] = max(most_at_once[0], sum(s.owner is not None for s in engine.slots.slots))
            return logits

        # every caller answered (none starved), none with an error
        outs = run_threads(
            [
                lambda p=p: llm(p, max_tokens=n_tokens, logit_bias=ban, logits_processor=[watch], **GREEDY)
                for p in prompts
            ],
            timeout=600,
        )
        for out in outs:
            assert out["choices"][0]["finish_reason"] == "length"
            assert out["usage"]["completion_tokens"] == n_tokens
        each = max(len(llm.tokenize(p)) for p in prompts) + n_tokens
        assert 1 < most_at_once[0] <= llm.context.n_ctx // (each - n_tokens // 2)  # together, as the cells allow
        bound, eos = parallel_bound(llm), llm.token_eos()

        def no_end(ids, scores):  # the reference's logit_bias
            scores[eos] = -float("inf")
            return scores

        for prompt, out in zip(prompts, outs):
            assert_same_or_near_tie(llm, prompt, out["choices"][0]["text"], n_tokens, processors=[no_end], limit=bound)


def test_requests_without_a_limit_share_the_cells_and_each_ends_at_the_context(smollm2_path, caplog):
    caplog.set_level(logging.WARNING, logger="llama_ffi")
    with Llama(smollm2_path, n_ctx=256, n_seq_max=4, kv_unified=True, n_threads=2, progress=False) as llm:
        ban = {llm.token_eos(): -float("inf")}
        prompts = [prompt_of(s) for s in SUBJECTS[:4]]
        outs = run_threads(
            [lambda p=p: llm(p, max_tokens=None, logit_bias=ban, **GREEDY) for p in prompts], timeout=600
        )
        for out in outs:
            assert out["choices"][0]["finish_reason"] == "length"
            assert out["usage"]["total_tokens"] == llm.context.n_ctx  # every cell of the sequence used
    ended = [r.getMessage() for r in caplog.records if "context" in r.getMessage() and "length" in r.getMessage()]
    assert len(ended) == len(prompts), ended


def test_max_tokens_within_the_context_is_not_logged(smollm2_path, caplog):
    caplog.set_level(logging.WARNING, logger="llama_ffi")
    with Llama(smollm2_path, n_ctx=256, n_threads=2, progress=False) as llm:
        out = llm(prompt_of("the sea"), max_tokens=8, logit_bias={llm.token_eos(): -float("inf")}, **GREEDY)
    assert out["choices"][0]["finish_reason"] == "length"
    assert not [r for r in caplog.records if "context" in r.getMessage()]
