"""The engine survives a failing step: a prompt-cache entry that cannot be restored is a miss, a
fault in a step ends the requests in it with the error, and the next request is served."""

from __future__ import annotations

import threading

from llama_ffi.high import Llama, LlamaDiskCache
from llama_ffi.high import state as state_format

GREEDY = {"temperature": 0.0}
LONG = "In the beginning of the story, a traveller walks along the river, past mills, farms and bridges, " * 3


def answer_within(fn, timeout: float = 120.0):
    """``fn()`` in a thread; its result, its exception raised here, or a failure if it hangs."""
    out: dict = {}

    def call():
        try:
            out["value"] = fn()
        except BaseException as error:  # noqa: BLE001 - raised below
            out["error"] = error

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the caller never got an answer"
    if "error" in out:
        raise out["error"]
    return out["value"]


def text_of(result) -> str:
    return result["choices"][0]["text"]


def test_a_cache_file_cut_short_is_a_miss_and_is_dropped(smollm2_path, tmp_path):
    def open_llama():
        llm = Llama(smollm2_path, n_ctx=1024, n_threads=2, n_seq_max=1, progress=False)
        llm.set_cache(LlamaDiskCache(tmp_path, 1 << 28))
        return llm

    with open_llama() as llm:
        want = text_of(llm(LONG, max_tokens=12, **GREEDY))  # stored when it ends
    [stored] = tmp_path.glob("*.llama-ffi-state")
    data = stored.read_bytes()
    damaged = data[: len(data) * 6 // 10]
    stored.write_bytes(damaged)
    with open_llama() as llm:
        n_prompt = len(llm.tokenize(LONG))
        before = llm.engine.status().stats.prompt_tokens
        assert text_of(answer_within(lambda: llm(LONG, max_tokens=12, **GREEDY))) == want
        assert llm.engine.status().stats.prompt_tokens - before == n_prompt  # evaluated afresh: a miss
        # ours, and damaged: removed; the completion then stored its state again, whole
        assert stored.read_bytes() != damaged
        state_format.decode(stored.read_bytes())
        assert text_of(answer_within(lambda: llm("Once upon a time", max_tokens=4, **GREEDY)))


def test_a_failing_step_ends_the_requests_in_it_and_the_next_request_is_served(smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, n_seq_max=4, progress=False) as llm:
        want = text_of(llm("The capital of France is", max_tokens=8, **GREEDY))
        engine = llm.engine
        steps = {"n": 0}

        def failing_once():  # the loop calls it before each step
            steps["n"] += 1
            if steps["n"] == 6:
                raise RuntimeError("injected fault")

        engine.before_step = failing_once
        outcomes: list = []

        def caller(i: int):
            try:
                outcomes.append(llm(f"Story number {i}:", max_tokens=24, **GREEDY))
            except RuntimeError as error:
                outcomes.append(error)

        threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        engine.before_step = None
        assert not any(t.is_alive() for t in threads), "a caller never got an answer"
        assert any(isinstance(o, RuntimeError) and "injected fault" in str(o) for o in outcomes)
        assert all(s.owner is None for s in engine.slots.slots)  # the failed requests left their slots
        got = answer_within(lambda: llm("The capital of France is", max_tokens=8, **GREEDY))
        assert text_of(got) == want  # the same Llama, the same slot shape: the same greedy answer
        streamed = answer_within(lambda: list(llm("Once upon a time", max_tokens=4, stream=True, **GREEDY)))
        assert streamed[-1]["choices"][0]["finish_reason"] == "length"
