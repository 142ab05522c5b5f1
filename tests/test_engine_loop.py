"""The engine's loop owns the context on its own thread: callers only submit and wait, a caller whose
event loop closed fails no one else, and close() ends the loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from test_engine import run_threads

from llama_ffi.high import Llama
from llama_ffi.testing import assert_same_or_near_tie, parallel_bound

GREEDY = dict(temperature=0.0)
LONG = "Write a long story about a lighthouse keeper and the sea."


def test_steps_run_in_the_engines_thread_for_every_kind_of_caller(smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, progress=False) as llm:
        threads: set[str] = set()

        def record(ids, logits):
            threads.add(threading.current_thread().name)
            return logits

        llm("Once upon a time", max_tokens=4, logits_processor=[record], **GREEDY)
        list(llm("Once upon a time", max_tokens=4, stream=True, logits_processor=[record], **GREEDY))
        run_threads([lambda: llm("Hello", max_tokens=4, logits_processor=[record], **GREEDY)] * 2)

        async def in_asyncio():
            return await llm.acreate_completion("Hello", max_tokens=4, logits_processor=[record], **GREEDY)

        asyncio.run(in_asyncio())
        assert threads == {"llama-ffi-engine"}
        engine_thread = next(t for t in threading.enumerate() if t.name == "llama-ffi-engine")
    engine_thread.join(10)
    assert not engine_thread.is_alive()  # close() stopped the loop


def test_a_caller_whose_event_loop_closed_fails_no_one_else(smollm2_path):
    """Tasks cancelled as their ``asyncio.run`` returns leave a waiter on a closed loop; the engine
    ends those requests later. A thread's request running meanwhile gets its whole answer."""
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, n_seq_max=4, progress=False) as llm:
        ban = {llm.token_eos(): -float("inf")}
        want = llm(LONG, max_tokens=48, logit_bias=ban, **GREEDY)["choices"][0]["text"]
        assert len(want) > 40

        async def abandon() -> None:
            task = asyncio.ensure_future(llm.acreate_completion(LONG, max_tokens=200, **GREEDY))
            await asyncio.sleep(0.05)
            task.cancel()  # asyncio.run returns right after: its loop closes

        def abandoning() -> None:
            for _ in range(6):
                asyncio.run(abandon())

        outs = run_threads([lambda: llm(LONG, max_tokens=48, logit_bias=ban, **GREEDY), abandoning])
        got = outs[0]["choices"][0]["text"]
        if got != want:  # decoded next to the abandoned ones: a near tie may flip, nothing more
            assert_same_or_near_tie(llm, LONG, got, 48, limit=parallel_bound(llm), logit_bias=ban)
        assert llm("Hello", max_tokens=4, **GREEDY)["usage"]["completion_tokens"] == 4  # still serving


def test_status_counts_every_generated_token_accepted_drafts_included(smollm2_path):
    from llama_ffi.high.speculative import SpecConfig, SpeculativeType

    spec = SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=smollm2_path, draft_n_max=4)
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, progress=False, speculative=spec) as llm:
        before = llm.engine.status()
        assert before.waiting == 0 and before.processing == 0 and len(before.slots) == llm.context.n_seq_max
        ban = {llm.token_eos(): -float("inf")}
        out = llm("One, two, three, four, five,", max_tokens=32, logit_bias=ban, **GREEDY)
        after = llm.engine.status()
        assert llm.last_speculative_stats.accepted_tokens > 8  # drafts were accepted
        # the first token comes from the prompt's step; every later one counts, drafted or not
        generated = after.stats.generated_tokens - before.stats.generated_tokens
        assert generated == out["usage"]["completion_tokens"] - 1
        assert after.evaluated > before.evaluated
        assert any(s.cached_tokens > 0 for s in after.slots) and after.processing == 0


def test_cancelling_a_request_stops_the_decode_of_its_prompt(smollm2_path):
    """A task cancelled while its long prompt is being decoded stops that decode (the context's
    abort flag; llama.cpp then rolls the batch's cells back): its slot never holds the whole
    prompt, which it would after a decode run to its end, and the Llama serves on."""
    import time

    with Llama(smollm2_path, n_ctx=4096, n_batch=4096, n_ubatch=256, n_threads=2, progress=False) as llm:
        prompt = llm.tokenize(" ".join(f"item {i}," for i in range(1200)))[:3800]
        engine = llm.engine

        async def cancel_mid_decode() -> None:
            task = asyncio.ensure_future(llm.acreate_completion(prompt, max_tokens=4, **GREEDY))
            deadline = time.monotonic() + 60
            while not engine.stepper.decoding and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            assert engine.stepper.decoding, "the prompt's decode never started"
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        asyncio.run(cancel_mid_decode())
        while engine.busy():
            time.sleep(0.01)
        held = max(s.cached_tokens for s in engine.status().slots)
        assert held < len(prompt)
        assert llm("Hello", max_tokens=4, **GREEDY)["usage"]["completion_tokens"] == 4


CONTEXT_CALLS = ("decode", "logits", "seq_rm", "clear", "seq_state_bytes", "set_seq_state_bytes", "set_state_bytes")


def test_every_context_task_runs_in_the_engines_thread(smollm2_path, tmp_path):
    """eval, state and slot files, resets, logits and status are tasks of the loop: whatever thread
    asks, the context's methods are called from the engine's thread only."""
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, n_seq_max=2, progress=False) as llm:
        seen: list[tuple[str, str]] = []
        for name in CONTEXT_CALLS:
            method = getattr(llm.context, name)

            def recorded(*args, _method=method, _name=name, **kwargs):
                seen.append((_name, threading.current_thread().name))
                return _method(*args, **kwargs)

            setattr(llm.context, name, recorded)
        tokens = llm.tokenize("Once upon a time")
        llm.reset()
        llm.eval(tokens)
        llm.logits()
        saved = llm.save_state()
        llm.load_state(saved)
        llm.slot_files.save(0, tmp_path / "slot0.bin")
        llm.slot_files.restore(1, tmp_path / "slot0.bin")
        llm.slot_files.erase(1)
        assert llm.scores.shape == (len(tokens), llm.n_vocab)
        assert sum(s.cached_tokens for s in llm.engine.status().slots) == len(tokens)
        llm("Hello", max_tokens=2, **GREEDY)
        called = {name for name, _ in seen}
        assert {"decode", "logits", "seq_state_bytes", "set_seq_state_bytes"} <= called, called
        assert {thread for _, thread in seen} == {"llama-ffi-engine"}, seen


def test_a_context_task_from_inside_a_step_is_refused_and_errors_reach_the_caller(smollm2_path):
    with Llama(smollm2_path, n_ctx=512, n_threads=2, progress=False) as llm:
        errors: list[BaseException] = []

        def reenter(ids, logits):
            try:
                llm.eval([1])
            except RuntimeError as error:
                errors.append(error)
            return logits

        out = llm("Hello", max_tokens=2, logits_processor=[reenter], **GREEDY)
        assert out["choices"][0]["text"] is not None
        assert errors and "inside a step" in str(errors[0])  # refused, not a deadlock

        def fails() -> None:
            raise KeyError("from the task")

        with contextlib.suppress(KeyError):
            llm.run_on_context(fails)
            raise AssertionError("the task's error did not reach its caller")
        assert llm("Hello", max_tokens=2, **GREEDY)["choices"][0]["finish_reason"] in ("length", "stop")


def test_single_sequence_work_waits_for_no_stream_and_moves_off_the_main_slot(smollm2_path):
    """A stream left unread holds its slot; eval on the main sequence takes another slot at once."""
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, n_seq_max=2, progress=False) as llm:
        ban = {llm.token_eos(): -float("inf")}
        stream = llm(LONG, max_tokens=800, stream=True, logit_bias=ban, **GREEDY)
        next(stream)  # running, and now unread
        busy = [s.seq for s in llm.engine.status().slots if s.processing]
        done = threading.Event()
        worker = threading.Thread(target=lambda: (llm.eval(llm.tokenize("Hi")), done.set()))
        worker.start()
        assert done.wait(60), "eval waited for an unread stream"
        assert [s.seq for s in llm.engine.status().slots if s.processing] == busy == [1 - llm.main_seq]
        stream.close()
        worker.join()
