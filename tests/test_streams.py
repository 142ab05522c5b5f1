"""A suspended stream never blocks another request, and resumes where it was.

A stream keeps its slot while its reader pauses (the engine decodes a bounded number of tokens
ahead), and other requests are decoded meanwhile, in the same steps: the texts equal each request
alone, or differ at an explained near tie (llama_ffi.testing: several sequences in one batch sum in another
order). A speculative Llama's streams go through the same engine, drafts and all."""

from __future__ import annotations

import gc
import threading
import time

import pytest
from stream_timing import arrivals, assert_token_by_token

from llama_ffi.high import Llama
from llama_ffi.high.speculative import SpecConfig, SpeculativeType
from llama_ffi.testing import assert_same_or_near_tie, assert_same_or_sampling_flip, parallel_bound

STORY = "Once upon a time, in a small village by the sea, there lived"
QUESTION = "The three primary colours are"
GREEDY = dict(temperature=0.0)


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=512, progress=False) as model:
        yield model


def text(chunks) -> str:
    return "".join(c["choices"][0]["text"] for c in chunks)


def alone(llm, prompt, **kw) -> str:
    return llm(prompt, **kw)["choices"][0]["text"]


def cache_is_consistent(llm) -> bool:
    return llm.context.seq_pos_max(llm.main_seq) + 1 == len(llm.tokens)


def in_thread(fn, timeout=60.0):
    """fn() run on another thread; fails (instead of hanging the suite) if it does not finish."""
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(value=fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the request waited on a suspended stream"
    return out["value"]


def same(llm, prompt: str, got: str, n: int) -> None:
    assert_same_or_near_tie(llm, prompt, got, n, limit=parallel_bound(llm))


def test_request_during_a_suspended_stream_runs_and_the_stream_resumes(llm):
    stream = llm(STORY, max_tokens=40, stream=True, **GREEDY)
    head = [next(stream) for _ in range(3)]
    same(llm, QUESTION, alone(llm, QUESTION, max_tokens=12, **GREEDY), 12)  # same thread: no deadlock
    same(llm, QUESTION, in_thread(lambda: alone(llm, QUESTION, max_tokens=12, **GREEDY)), 12)
    same(llm, STORY, text(head) + text(stream), 40)
    assert cache_is_consistent(llm)


def test_a_seeded_sampled_stream_is_reproducible_whatever_runs_meanwhile(llm):
    prompt, sampling = llm.tokenize(STORY), dict(temperature=0.9, seed=11, repeat_penalty=1.2)
    want = list(llm.generate(prompt, max_tokens=30, **sampling))
    tokens = llm.generate(prompt, max_tokens=30, **sampling)
    head = [next(tokens) for _ in range(4)]
    same(llm, QUESTION, alone(llm, QUESTION, max_tokens=12, **GREEDY), 12)
    assert_same_or_sampling_flip(llm, prompt, head + list(tokens), want, sampling["temperature"], batched=True)


def test_two_streams_interleaved_chunk_by_chunk(llm):
    a = llm(STORY, max_tokens=30, stream=True, **GREEDY)
    b = llm(QUESTION, max_tokens=30, stream=True, **GREEDY)
    got_a, got_b = [], []
    for x, y in zip(a, b):
        got_a.append(x)
        got_b.append(y)
    got_a += list(a)
    got_b += list(b)
    same(llm, STORY, text(got_a), 30)
    same(llm, QUESTION, text(got_b), 30)


def test_generate_is_a_stream_too(llm):
    prompt = llm.tokenize(STORY)
    tokens = llm.generate(prompt, max_tokens=20, **GREEDY)
    head = [next(tokens) for _ in range(5)]
    assert alone(llm, QUESTION, max_tokens=6, **GREEDY)
    rest = list(tokens)
    assert len(head + rest) == 20
    assert_same_or_near_tie(llm, prompt, head + rest, 20, limit=parallel_bound(llm))


def test_abandoned_stream_leaves_a_usable_consistent_cache(llm):
    stream = llm(STORY, max_tokens=200, stream=True, **GREEDY)
    for _, _ in zip(range(4), stream):  # a break out of the loop
        pass
    del stream
    gc.collect()
    assert cache_is_consistent(llm)
    assert llm.engine.status().idle  # its slot was freed at once
    same(llm, QUESTION, alone(llm, QUESTION, max_tokens=12, **GREEDY), 12)
    assert cache_is_consistent(llm)


def test_closing_a_suspended_stream_does_not_touch_another(llm):
    stream = llm(STORY, max_tokens=200, stream=True, **GREEDY)
    next(stream)
    other = llm(QUESTION, max_tokens=16, stream=True, **GREEDY)  # parks `stream` at its first chunk
    first = next(other)
    stream.close()  # its clean-up must not cut `other`'s cache
    same(llm, QUESTION, text([first]) + text(other), 16)
    assert list(stream) == []  # a closed stream is exhausted
    assert cache_is_consistent(llm)


def test_slow_stream_and_completions_on_two_threads_each_get_their_own_output(llm):
    results: dict = {"questions": []}

    def slow_reader():
        chunks = []
        for chunk in llm(STORY, max_tokens=32, stream=True, **GREEDY):
            chunks.append(chunk)
            time.sleep(0.02)
        results["story"] = text(chunks)

    def asker():
        for _ in range(5):
            results["questions"].append(alone(llm, QUESTION, max_tokens=10, **GREEDY))

    threads = [threading.Thread(target=slow_reader), threading.Thread(target=asker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    same(llm, STORY, results["story"], 32)
    for answer in results["questions"]:
        same(llm, QUESTION, answer, 10)


def test_stream_of_a_closed_llama_raises(smollm2_path):
    model = Llama(smollm2_path, n_ctx=128, progress=False)
    stream = model(STORY, max_tokens=20, stream=True, **GREEDY)
    next(stream)
    model.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(stream)


def test_a_speculative_stream_goes_on_while_other_requests_run_between_its_chunks(llm, smollm2_path):
    from test_speculative import REPETITIVE

    # short keys: the n-gram drafter finds repeats within this request's own prompt and output
    spec_config = SpecConfig(type=SpeculativeType.NGRAM_MAP_K, ngram_size_n=3, ngram_size_m=8)
    with Llama(smollm2_path, n_ctx=1024, progress=False, speculative=spec_config) as spec:
        stream = spec(REPETITIVE, max_tokens=64, stream=True, **GREEDY)
        head = []
        for _ in range(6):  # other requests between its chunks, in other slots
            head.append(next(stream))
            alone(spec, QUESTION, max_tokens=4, **GREEDY)
        rest = list(stream)
        assert spec.last_speculative_stats.accepted_tokens > 0
        # verified drafts are batches of their own sizes: the plain greedy answer, or a measured
        # near tie (it differs on AVX2 CPUs)
        assert_same_or_near_tie(llm, REPETITIVE, text(head) + text(rest), 64)
        assert cache_is_consistent(spec)


def test_a_greedy_stream_delivers_each_token_as_it_is_decoded(llm):
    chunks = llm(STORY, max_tokens=48, stream=True, ignore_eos=True, **GREEDY)
    assert_token_by_token(arrivals(chunks))


def test_an_asyncio_greedy_stream_delivers_each_token_as_it_is_decoded(llm):
    import asyncio

    async def arrived() -> list[float]:
        chunks = await llm.acreate_completion(STORY, max_tokens=48, stream=True, ignore_eos=True, **GREEDY)
        return [time.perf_counter() async for _ in chunks]

    assert_token_by_token(asyncio.run(arrived()))
