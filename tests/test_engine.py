"""One engine for every request (llama_ffi.high.engine): callers on several threads and in asyncio
decoded together, slots that keep their prompt cache, and the defects that sharing one context
used to cause. Outputs are compared with each request alone: equal, or an explained near tie."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest
import tiny_adapters
from waiting import steady

from llama_ffi.high import Llama
from llama_ffi.high.speculative import SpecConfig, SpeculativeType
from llama_ffi.testing import assert_same_or_near_tie, assert_same_or_sampling_flip, parallel_bound

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [f"Question {i}: name a city in country number {i}. Answer:" for i in range(8)]
GREEDY = dict(temperature=0.0)


# Every concurrency test runs on a plain Llama, on speculative ones (an n-gram drafter, and a draft
# model: SmolLM2 itself, whose drafts are accepted, so verification batches carry long drafts) and
# on one with logits_all: they all serve requests through the same engine.
KINDS = {
    "plain": {},
    "ngram": {"speculative": SpecConfig(type=SpeculativeType.NGRAM_MAP_K, ngram_size_n=2, ngram_size_m=8)},
    "draft": {"speculative": "smollm2"},
    "logits_all": {"logits_all": True},
}


@pytest.fixture(scope="module")
def plain(smollm2_path):
    """The reference: each request alone on a plain Llama."""
    with Llama(smollm2_path, n_ctx=2048, n_threads=2, progress=False) as llm:
        yield llm


@pytest.fixture(scope="module", params=list(KINDS))
def llm(request, smollm2_path, plain):
    kwargs = dict(KINDS[request.param])
    if request.param == "plain":
        yield plain
        return
    if kwargs.get("speculative") == "smollm2":
        kwargs["speculative"] = SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=smollm2_path, draft_n_max=4)
    with Llama(smollm2_path, n_ctx=2048, n_threads=2, progress=False, **kwargs) as llm:
        yield llm


def text_of(result) -> str:
    return result["choices"][0]["text"]


def run_threads(fns, timeout=300.0) -> list:
    out: list = [None] * len(fns)
    errors: list = []

    def call(i, fn):
        try:
            out[i] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i, fn), daemon=True) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a caller never got its answer"
    if errors:
        raise errors[0]
    return out


# ---- concurrency ----------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_threads_are_decoded_together_and_each_gets_its_own_answer(model, smollm2_path, gemma3_path):
    path = smollm2_path if model == "smollm2" else gemma3_path
    with Llama(path, n_ctx=2048, n_threads=2, progress=False) as llm:
        stats = llm.engine.status().stats
        steps, tokens = stats.generation_steps, stats.generated_tokens
        outs = run_threads([lambda p=p: llm(p, max_tokens=24, **GREEDY) for p in PROMPTS])
        stats = llm.engine.status().stats
        # several sequences per decode: more tokens than steps (one at a time, they would be equal)
        assert stats.generated_tokens - tokens > 2 * (stats.generation_steps - steps)
        bound = parallel_bound(llm)
        for prompt, out in zip(PROMPTS, outs):
            assert_same_or_near_tie(llm, prompt, text_of(out), 24, limit=bound)


def test_a_short_request_arriving_during_a_long_one_finishes_first(llm):
    ban = {llm.token_eos(): -float("inf")}
    finished: list[str] = []
    started = threading.Event()

    def long():
        stream = llm("Write a long story about the sea.", max_tokens=384, stream=True, logit_bias=ban, **GREEDY)
        for i, _ in enumerate(stream):
            if i == 8:
                started.set()
        finished.append("long")

    def short():
        assert started.wait(120)
        llm("The capital of France is", max_tokens=16, logit_bias=ban, **GREEDY)
        finished.append("short")

    run_threads([long, short])
    assert finished == ["short", "long"]


def test_a_seeded_sampled_request_is_reproducible_whatever_else_runs(llm, plain):
    prompt = llm.tokenize(PROMPTS[0])
    sampling = dict(temperature=0.8, seed=1234, max_tokens=24)
    plain.reset()
    want = [t for t in plain.generate(prompt, **sampling)]
    others = [lambda p=p: llm(p, max_tokens=24, **GREEDY) for p in PROMPTS[1:5]]
    got = run_threads([lambda: list(llm.generate(prompt, **sampling)), *others])[0]
    assert_same_or_sampling_flip(plain, prompt, got, want, sampling["temperature"], batched=True)


def test_an_unread_stream_waits_in_its_slot_and_blocks_nobody(llm, plain):
    from llama_ffi.high.engine.request import AHEAD

    stream = llm(PROMPTS[1], max_tokens=200, stream=True, logit_bias={llm.token_eos(): -float("inf")}, **GREEDY)
    next(stream)
    answer = text_of(llm(PROMPTS[2], max_tokens=12, **GREEDY))
    assert_same_or_near_tie(plain, PROMPTS[2], answer, 12, limit=parallel_bound(plain))
    (seq,) = [s.seq for s in llm.engine.status().slots if s.processing]

    def held() -> int:
        return next(s.cached_tokens for s in llm.engine.status().slots if s.seq == seq)

    generated = steady(held, "the unread stream") - len(llm.tokenize(PROMPTS[1]))
    draft = llm.speculative.max_draft if llm.speculative else 0  # one step may verify a whole draft
    assert generated <= AHEAD + 2 + draft  # bounded: it waits for its reader
    rest = list(stream)
    assert len(rest) > 150
    assert llm.engine.status().idle


def test_close_waits_for_a_request_in_flight(smollm2_path):
    llm = Llama(smollm2_path, n_ctx=1024, n_threads=2, progress=False)
    ban = {llm.token_eos(): -float("inf")}
    result: dict = {}
    thread = threading.Thread(
        target=lambda: result.update(out=llm("Once upon a time", max_tokens=96, logit_bias=ban, **GREEDY))
    )
    thread.start()
    while llm.n_evaluated < 20:  # it is decoding
        time.sleep(0.01)
    llm.close()
    thread.join(60)
    assert result["out"]["usage"]["completion_tokens"] == 96  # finished, not cut off nor crashed
    with pytest.raises(RuntimeError, match="closed"):
        llm("Once upon a time", max_tokens=4)


# ---- slots and their caches ---------------------------------------------------------------------------
def test_two_users_alternating_multi_turn_chats_each_keep_their_prefix(llm):
    chats = {u: [{"role": "system", "content": f"You are assistant number {u}, answer briefly."}] for u in "ab"}
    llm.reset()
    for turn in range(3):
        for user, messages in chats.items():
            messages.append({"role": "user", "content": f"Tell me fact {turn} about the number {user}."})
            before = llm.engine.status().stats.prompt_tokens
            out = llm.create_chat_completion(messages, max_tokens=8, **GREEDY)
            decoded = llm.engine.status().stats.prompt_tokens - before
            messages.append(out["choices"][0]["message"])
            if turn:  # the earlier turns are cached in that user's slot: only the new turn is decoded
                assert decoded < out["usage"]["prompt_tokens"] / 2, (turn, user, decoded)


def test_kv_unified_false_reports_the_context_each_sequence_has(smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, kv_unified=False, progress=False) as split:
        per_seq = split.n_ctx()
        assert per_seq == split.context.n_ctx_seq == split.context.n_ctx // split.context.n_seq_max
        with pytest.raises(ValueError, match=f"the context holds only {per_seq}"):
            split(" word" * (per_seq + 5), max_tokens=2)
        outs = run_threads([lambda p=p: split(p, max_tokens=8, **GREEDY) for p in PROMPTS])
        for prompt, out in zip(PROMPTS, outs):
            assert_same_or_near_tie(split, prompt, text_of(out), 8, limit=parallel_bound(split))


# ---- asyncio ----------------------------------------------------------------------------------------------
def test_asyncio_requests_run_together_without_blocking_the_loop(llm, plain):
    async def main():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        tick_task = asyncio.create_task(ticker())
        outs = await asyncio.gather(*(llm.acreate_completion(p, max_tokens=16, **GREEDY) for p in PROMPTS[:4]))
        chunks = [c async for c in await llm.acreate_completion(PROMPTS[4], max_tokens=16, stream=True, **GREEDY)]
        chat = await llm.acreate_chat_completion([{"role": "user", "content": "Hi!"}], max_tokens=8, **GREEDY)
        done.set()
        await tick_task
        return outs, chunks, chat, ticks

    outs, chunks, chat, ticks = asyncio.run(main())
    assert ticks > 20  # the loop kept running while the engine decoded
    bound = parallel_bound(plain)
    for prompt, out in zip(PROMPTS, outs):
        assert_same_or_near_tie(plain, prompt, text_of(out), 16, limit=bound)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length") and "usage" in chunks[-1]
    assert_same_or_near_tie(plain, PROMPTS[4], "".join(c["choices"][0]["text"] for c in chunks), 16, limit=bound)
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["content"]


def test_cancelling_an_asyncio_task_frees_its_slot(llm):
    async def main():
        task = asyncio.create_task(
            llm.acreate_completion(PROMPTS[0], max_tokens=500, logit_bias={llm.token_eos(): -float("inf")}, **GREEDY)
        )
        n_prompt = len(llm.tokenize(PROMPTS[0]))
        while not any(s.processing and s.cached_tokens > n_prompt + 4 for s in llm.engine.status().slots):
            await asyncio.sleep(0.01)  # until it generates
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):
            if llm.engine.status().idle:
                break
            await asyncio.sleep(0.01)

    before = llm.n_evaluated
    asyncio.run(main())
    assert llm.engine.status().idle
    assert llm.n_evaluated - before < 400  # it stopped long before its 500 tokens


# ---- adapters ----------------------------------------------------------------------------------------------
STORY = "Once upon a time, in a small village,"  # a prompt the test LoRA changes the answer to


def test_concurrent_requests_under_different_adapters_each_equal_their_adapter_alone(smollm2_path, tmp_path):
    lora = tiny_adapters.write_lora(tmp_path / "coder.gguf", smollm2_path, seed=1)
    selections = [None, [{"name": "coder"}], [{"name": "coder", "scale": 0.5}], None]
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, progress=False) as llm:
        llm.load_lora("coder", lora)
        want = [text_of(llm(STORY, max_tokens=16, active_loras=s, **GREEDY)) for s in selections]
        assert len(set(want[:3])) == 3
        outs = run_threads([lambda s=s: llm(STORY, max_tokens=16, active_loras=s, **GREEDY) for s in selections])
        # one selection per step: each request's steps decode it alone, so the texts are equal
        assert [text_of(o) for o in outs] == want


def test_save_and_load_state_carry_the_adapter_selection(smollm2_path, tmp_path):
    lora = tiny_adapters.write_lora(tmp_path / "coder.gguf", smollm2_path, seed=1)
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, progress=False) as llm:
        llm.load_lora("coder", lora)
        base = text_of(llm(STORY, max_tokens=12, **GREEDY))
        coder = text_of(llm(STORY, max_tokens=12, active_loras=[{"name": "coder"}], **GREEDY))
        assert base != coder
        saved = llm.save_state()  # a cache computed under the LoRA
        llm.reset()
        llm.load_state(saved)
        before = llm.engine.status().stats.prompt_tokens
        assert text_of(llm(STORY, max_tokens=12, **GREEDY)) == base  # not answered from it
        assert llm.engine.status().stats.prompt_tokens - before >= len(llm.tokenize(STORY))
        llm.reset()
        llm.load_state(saved)
        before = llm.engine.status().stats.prompt_tokens
        assert text_of(llm(STORY, max_tokens=12, active_loras=[{"name": "coder"}], **GREEDY)) == coder
        assert llm.engine.status().stats.prompt_tokens - before == 1  # the same selection: reused


# ---- speculative ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["ngram", "draft"])
def test_speculating_threads_share_steps_and_each_gets_its_own_answer(kind, smollm2_path, plain):
    """Drafts of several sequences are verified in the same batches (not one sequence at a time),
    and every answer is plain greedy decoding's or an explained near tie."""
    spec = (
        KINDS[kind]["speculative"]
        if kind == "ngram"
        else SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=smollm2_path, draft_n_max=4)
    )
    # two callers (steps draft while at most engine.speculation.DRAFTING_SEQUENCES sequences
    # generate), each continuing a pattern that its history repeats: both draft nearly every step
    prompts = [" ".join(["red green blue yellow"] * 6), " ".join(["one two three four five"] * 5)]
    with Llama(smollm2_path, n_ctx=2048, n_threads=2, progress=False, speculative=spec) as llm:
        seen = []

        def watch(ids, logits):  # which sequences generate at once, and whether drafts were pending
            seen.append(
                (
                    sum(c.drafting is not None for c in llm.engine.work.generating),
                    sum(bool(c.drafting and c.drafting.draft) for c in llm.engine.work.generating),
                )
            )
            return logits

        outs = run_threads([lambda p=p: llm(p, max_tokens=32, logits_processor=[watch], **GREEDY) for p in prompts])
        assert max(n for n, _ in seen) > 1  # several speculating sequences at once
        assert max(d for _, d in seen) > 1  # drafts of two sequences in one step
        bound = parallel_bound(plain)
        for prompt, out in zip(prompts, outs):
            assert_same_or_near_tie(plain, prompt, text_of(out), 32, limit=bound)
        assert llm.last_speculative_stats.accepted_tokens > 0


# ---- defects ------------------------------------------------------------------------------------------------------
def test_each_choice_has_its_own_reasoning_budget(llm):
    from llama_ffi.high.chat.completion import render_prompt

    kw = dict(
        max_tokens=40,
        reasoning_budget=3,
        reasoning_budget_message=" Time is up.",
        reasoning_start_in_prompt=True,
        chat_handler=lambda messages, **k: render_prompt(llm, messages) + "<think>\n",
    )
    messages = [{"role": "user", "content": "Why is the sky blue?"}]
    alone = llm.create_chat_completion(messages, temperature=0, **kw)["choices"][0]["message"]
    both = llm.create_chat_completion(messages, n=2, temperature=0, **kw)["choices"]
    for choice in both:  # a shared budget would count both choices' tokens and split the forced end
        assert choice["message"]["reasoning_content"] == alone["reasoning_content"]
        assert choice["message"]["reasoning_content"].endswith("Time is up.")


GRAMMAR_AND_STDERR = r"""
import os, sys, threading
sys.path.insert(0, sys.argv[1])
from llama_ffi.high import Llama, LlamaGrammar
llm = Llama(sys.argv[2], vocab_only=True, progress=False)
stop = threading.Event()
def writer():
    i = 0
    while not stop.is_set() or i < 200:
        os.write(2, f"line {i}\n".encode())
        i += 1
    os.write(2, f"wrote {i}\n".encode())
t = threading.Thread(target=writer)
t.start()
for _ in range(40):
    try:
        LlamaGrammar.from_string('root ::= "a" | ').check(llm.loaded_model)
    except ValueError:
        pass
    LlamaGrammar.from_string('root ::= "yes" | "no"').check(llm.loaded_model)
stop.set()
t.join()
"""


def test_grammar_parsing_loses_no_other_thread_s_stderr(smollm2_path):
    out = subprocess.run(
        [sys.executable, "-c", GRAMMAR_AND_STDERR, REPO, str(smollm2_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stderr.splitlines()
    total = int(next(line for line in lines if line.startswith("wrote ")).split()[1])
    written = {line for line in lines if line.startswith("line ")}
    assert len(written) == total, f"{total - len(written)} of {total} lines written to stderr went missing"


# ---- prompt caches ------------------------------------------------------------------------------------------------
LONG = "In the beginning of the story, a traveller walks along the river, past mills, farms and bridges, " * 3


@pytest.mark.parametrize("kind", ["ram", "disk"])
def test_a_prompt_cache_restores_what_a_slot_lost(smollm2_path, tmp_path, kind):
    from llama_ffi.high import LlamaDiskCache, LlamaRAMCache

    def make_cache():
        return LlamaRAMCache(capacity_bytes=1 << 28) if kind == "ram" else LlamaDiskCache(tmp_path, 1 << 28)

    with Llama(smollm2_path, n_ctx=1024, n_threads=2, n_seq_max=1, progress=False) as llm:  # one slot
        llm.set_cache(make_cache())
        want = text_of(llm(LONG, max_tokens=12, **GREEDY))
        llm("Something else entirely.", max_tokens=4, **GREEDY)  # takes the only slot: LONG is stored
        before = llm.engine.status().stats.prompt_tokens
        again = text_of(llm(LONG, max_tokens=12, **GREEDY))
        assert llm.engine.status().stats.prompt_tokens - before == 1  # restored: only its last token is decoded
        assert again == want
        if kind == "disk":  # another process (another Llama) finds it on disk
            with Llama(smollm2_path, n_ctx=1024, n_threads=2, n_seq_max=1, progress=False) as other:
                other.set_cache(make_cache())
                before = other.engine.status().stats.prompt_tokens
                assert text_of(other(LONG, max_tokens=12, **GREEDY)) == want
                assert other.engine.status().stats.prompt_tokens - before == 1


def test_a_prompt_cache_keeps_within_its_capacity(smollm2_path):
    from llama_ffi.high import LlamaRAMCache

    with Llama(smollm2_path, n_ctx=1024, n_threads=2, n_seq_max=1, progress=False) as llm:
        cache = LlamaRAMCache(capacity_bytes=1 << 28)
        llm.set_cache(cache)
        llm(LONG, max_tokens=4, **GREEDY)  # stored when it ends
        one = cache.cache_size
        assert len(cache) == 1 and one > 0
        small = LlamaRAMCache(capacity_bytes=one + one // 2)  # room for one entry, not two
        llm.set_cache(small)
        for text in (LONG, "Another text " * 20, LONG):
            llm(text, max_tokens=4, **GREEDY)
        assert len(small) == 1 and small.cache_size <= small.capacity_bytes
    with pytest.raises(TypeError, match="set_cache takes"):
        llm.set_cache({})
