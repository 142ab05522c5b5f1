"""A suspended stream never blocks another request, and resumes exactly where it was.

A request that comes while a stream is suspended parks it (its context state is copied); the
stream's next chunk restores that state, so its text is the text it gives uninterrupted."""

from __future__ import annotations

import gc
import threading
import time

import pytest

from llama_ffi.high import Llama
from llama_ffi.high.speculative import SpecConfig, SpeculativeType

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
    return llm.context.seq_pos_max(0) + 1 == len(llm.tokens)


def in_thread(fn, timeout=60.0):
    """fn() run on another thread; fails (instead of hanging the suite) if it does not finish."""
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(value=fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the request waited on a suspended stream"
    return out["value"]


@pytest.mark.parametrize("sampling", [GREEDY, dict(temperature=0.9, seed=11, repeat_penalty=1.2)])
def test_request_during_a_suspended_stream_runs_and_the_stream_resumes_exactly(llm, sampling):
    want_story = alone(llm, STORY, max_tokens=40, **sampling)
    want_question = alone(llm, QUESTION, max_tokens=12, **sampling)
    stream = llm(STORY, max_tokens=40, stream=True, **sampling)
    head = [next(stream) for _ in range(3)]
    assert alone(llm, QUESTION, max_tokens=12, **sampling) == want_question  # same thread: no deadlock
    assert in_thread(lambda: alone(llm, QUESTION, max_tokens=12, **sampling)) == want_question
    assert text(head) + text(stream) == want_story
    assert cache_is_consistent(llm)


def test_two_streams_interleaved_chunk_by_chunk(llm):
    want_a = alone(llm, STORY, max_tokens=30, **GREEDY)
    want_b = alone(llm, QUESTION, max_tokens=30, **GREEDY)
    a = llm(STORY, max_tokens=30, stream=True, **GREEDY)
    b = llm(QUESTION, max_tokens=30, stream=True, **GREEDY)
    got_a, got_b = [], []
    for x, y in zip(a, b):
        got_a.append(x)
        got_b.append(y)
    got_a += list(a)
    got_b += list(b)
    assert (text(got_a), text(got_b)) == (want_a, want_b)


def test_generate_is_a_stream_too(llm):
    prompt = llm.tokenize(STORY)
    want = list(llm.generate(prompt, max_tokens=20, **GREEDY))
    tokens = llm.generate(prompt, max_tokens=20, **GREEDY)
    head = [next(tokens) for _ in range(5)]
    assert alone(llm, QUESTION, max_tokens=6, **GREEDY)
    assert head + list(tokens) == want


def test_abandoned_stream_leaves_a_usable_consistent_cache(llm):
    want = alone(llm, QUESTION, max_tokens=12, **GREEDY)
    stream = llm(STORY, max_tokens=200, stream=True, **GREEDY)
    for _, _ in zip(range(4), stream):  # a break out of the loop
        pass
    del stream
    gc.collect()
    assert cache_is_consistent(llm)
    assert alone(llm, QUESTION, max_tokens=12, **GREEDY) == want
    assert cache_is_consistent(llm)


def test_closing_a_parked_stream_does_not_touch_the_new_owner(llm):
    want = alone(llm, QUESTION, max_tokens=16, **GREEDY)
    stream = llm(STORY, max_tokens=200, stream=True, **GREEDY)
    next(stream)
    other = llm(QUESTION, max_tokens=16, stream=True, **GREEDY)  # parks `stream` at its first chunk
    first = next(other)
    stream.close()            # parked: its clean-up must not cut `other`'s cache
    assert text([first]) + text(other) == want
    assert list(stream) == []  # a closed stream is exhausted
    assert cache_is_consistent(llm)


def test_slow_stream_and_completions_on_two_threads_each_get_their_sequential_output(llm):
    want_story = alone(llm, STORY, max_tokens=32, **GREEDY)
    want_question = alone(llm, QUESTION, max_tokens=10, **GREEDY)
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
    assert results["story"] == want_story
    assert results["questions"] == [want_question] * 5


def test_stream_of_a_closed_llama_raises(smollm2_path):
    model = Llama(smollm2_path, n_ctx=128, progress=False)
    stream = model(STORY, max_tokens=20, stream=True, **GREEDY)
    next(stream)
    model.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(stream)


def test_speculative_stream_parked_and_resumed(smollm2_path):
    from test_speculative import REPETITIVE

    with Llama(smollm2_path, n_ctx=1024, progress=False,
               speculative=SpecConfig(type=SpeculativeType.NGRAM_MAP_K)) as spec:
        want = alone(spec, REPETITIVE, max_tokens=64, **GREEDY)
        stream = spec(REPETITIVE, max_tokens=64, stream=True, **GREEDY)
        head = []
        for _ in range(6):  # parked in the middle of verified drafts
            head.append(next(stream))
            alone(spec, QUESTION, max_tokens=4, **GREEDY)
        rest = list(stream)
        assert spec.last_speculative_stats.accepted_tokens > 0
        assert text(head) + text(rest) == want
