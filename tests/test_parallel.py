"""Many sequences at once: a list of prompts and n choices per prompt, decoded together in one
llama_decode per step, against the same prompts run alone (near ties explained, see llama_ffi.testing)."""

from __future__ import annotations

import pytest

from llama_ffi.high import Llama, LlamaGrammar
from llama_ffi.high.engine.choices import DEFAULT_SLOTS, choice_seed
from llama_ffi.testing import assert_same_or_near_tie, parallel_bound

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fib(n):",
    "The three primary colors are",
    "My favourite recipe for soup",
    "Water boils at",
]
N = 24


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=2048, n_threads=2, progress=False) as llm:
        yield llm


def texts(result) -> list[str]:
    return [c["text"] for c in result["choices"]]


def prompt_tokens_decoded(llm, *args, **kwargs) -> tuple[dict, int]:
    """A completion from cold caches, and how many prompt tokens the engine decoded for it."""
    llm.reset()
    before = llm.engine.status().stats.prompt_tokens
    result = llm(*args, **kwargs)
    return result, llm.engine.status().stats.prompt_tokens - before


def test_defaults_give_slots_with_a_unified_cache(llm):
    assert llm.context.n_seq_max == DEFAULT_SLOTS
    assert llm.context_params.kv_unified
    # batches (prompts, parallel steps) use the n_threads given, as llama.cpp's tools do
    assert llm.context_params.n_threads_batch == llm.context_params.n_threads == 2


def test_a_prompt_that_fills_the_context_generates_nothing(smollm2_path):
    with Llama(smollm2_path, n_ctx=256, n_threads=2, progress=False) as small:
        full = [small.token_bos()] + small.tokenize(" word" * 400, add_bos=False)[: small.n_ctx() - 1]
        result = small([full, small.tokenize(PROMPTS[0])], max_tokens=4, temperature=0)
        assert result["choices"][0]["text"] == "" and result["choices"][0]["finish_reason"] == "length"
        alone = small(full, max_tokens=4, temperature=0)["choices"][0]
        assert alone["text"] == "" and alone["finish_reason"] == "length"
        assert result["choices"][1]["text"]


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_greedy_choices_equal_each_prompt_alone_or_a_near_tie(model, smollm2_path, gemma3_path):
    path = smollm2_path if model == "smollm2" else gemma3_path
    with Llama(path, n_ctx=2048, n_threads=2, progress=False) as llm:
        result = llm(PROMPTS, max_tokens=N, temperature=0)
        assert [c["index"] for c in result["choices"]] == list(range(len(PROMPTS)))
        for prompt, choice in zip(PROMPTS, result["choices"]):
            assert_same_or_near_tie(llm, prompt, choice["text"], N, limit=parallel_bound(llm))
            alone = llm(prompt, max_tokens=N, temperature=0)["choices"][0]
            if alone["text"] == choice["text"]:
                assert choice["finish_reason"] == alone["finish_reason"]
        single = llm(PROMPTS[0], max_tokens=N, temperature=0)  # the plain path still works after it
        assert_same_or_near_tie(llm, PROMPTS[0], single["choices"][0]["text"], N)


def test_token_prompts_and_usage(llm):
    tokens = [llm.tokenize(p) for p in PROMPTS[:3]]
    by_text = llm(PROMPTS[:3], max_tokens=8, temperature=0)
    by_tokens = llm(tokens, max_tokens=8, temperature=0, logprobs=0)
    assert texts(by_text) == texts(by_tokens)
    usage = by_tokens["usage"]
    assert usage["prompt_tokens"] == sum(len(t) for t in tokens)
    assert usage["completion_tokens"] == sum(len(c["logprobs"]["tokens"]) for c in by_tokens["choices"]) > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_n_greedy_choices_evaluate_the_prompt_once(llm):
    result, decoded = prompt_tokens_decoded(llm, PROMPTS[1], n=3, max_tokens=N, temperature=0)
    assert decoded == len(llm.tokenize(PROMPTS[1]))
    assert [c["index"] for c in result["choices"]] == [0, 1, 2]
    for text in texts(result):
        assert_same_or_near_tie(llm, PROMPTS[1], text, N, limit=parallel_bound(llm))
    two, decoded = prompt_tokens_decoded(llm, PROMPTS[:2], n=2, max_tokens=4, temperature=0)
    assert len(two["choices"]) == 4
    assert decoded == sum(len(llm.tokenize(p)) for p in PROMPTS[:2])


def test_seeded_choices_are_reproducible_and_differ(llm):
    kw = dict(n=3, max_tokens=16, temperature=1.0, seed=1234)
    first, again = llm(PROMPTS[:2], **kw), llm(PROMPTS[:2], **kw)
    assert texts(first) == texts(again)
    assert len(first["choices"]) == 6
    assert len(set(texts(first)[:3])) > 1  # choices of one prompt use seeds 1234, 1235, 1236
    assert texts(llm(PROMPTS[:2], **{**kw, "seed": 99})) != texts(first)
    assert choice_seed(1234, 2) == 1236 and choice_seed(0xFFFFFFFF, 5) == 0xFFFFFFFF


def test_more_choices_than_slots_take_freed_slots(smollm2_path, llm):
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, n_seq_max=2, progress=False) as small:
        result = small(PROMPTS, max_tokens=12, temperature=0)
        assert small.context.n_seq_max == 2
        for prompt, text in zip(PROMPTS, texts(result)):
            assert_same_or_near_tie(small, prompt, text, 12, limit=parallel_bound(small))
        # n larger than the slots: the prompt is evaluated once per group of slots (3 groups of <= 2)
        five, decoded = prompt_tokens_decoded(small, PROMPTS[0], n=5, max_tokens=4, temperature=0)
        assert len(five["choices"]) == 5
        # the later groups find the prompt in a slot's cache: only its last token is decoded again
        assert decoded == len(small.tokenize(PROMPTS[0])) + 2


def test_unbounded_choices_that_cannot_share_the_context_run_one_after_another(smollm2_path):
    with Llama(smollm2_path, n_ctx=256, n_threads=2, progress=False) as small:
        n_ctx = small.n_ctx()
        prompt = small.tokenize(PROMPTS[0])
        ban = {small.token_eos(): -float("inf")}  # every choice runs until the context is full
        result, decoded = prompt_tokens_decoded(
            small, prompt, n=3, max_tokens=None, temperature=0.8, seed=11, logit_bias=ban
        )
        assert [c["finish_reason"] for c in result["choices"]] == ["length"] * 3
        assert result["usage"]["completion_tokens"] == 3 * (n_ctx - len(prompt))
        # one group each, one after another: the first decodes the prompt, each later one at least
        # its last token again (the cached prompt), at most the whole prompt (its cache was evicted)
        assert len(prompt) + 2 <= decoded <= 3 * len(prompt)


def test_per_choice_stop_strings_budgets_and_logprobs(llm):
    result = llm(PROMPTS[:3], max_tokens=N, temperature=0, stop=["\n"], logprobs=2)
    for prompt, choice in zip(PROMPTS[:3], result["choices"]):
        assert "\n" not in choice["text"]
        lp = choice["logprobs"]
        assert "".join(lp["tokens"]).startswith(choice["text"])  # a stop string's token is not text
        assert all(
            len(t) == 2 and max(t.values()) >= v - 1e-6 for t, v in zip(lp["top_logprobs"], lp["token_logprobs"])
        )
        # equal to the prompt alone (stop string and finish reason too), or an explained near tie
        alone = llm(prompt, max_tokens=N, temperature=0, stop=["\n"], logprobs=2)["choices"][0]
        if choice["text"] == alone["text"]:
            assert choice["finish_reason"] == alone["finish_reason"]
            assert lp["tokens"] == alone["logprobs"]["tokens"]
        else:  # the texts part before the stop string: that is where the runs differ
            assert_same_or_near_tie(llm, prompt, choice["text"], len(lp["tokens"]), limit=parallel_bound(llm))


def test_grammar_applies_to_every_choice(llm):
    grammar = LlamaGrammar.from_string('root ::= "yes" | "no"')
    result = llm(
        ["Is the sky blue? Answer:", "Is fire cold? Answer:"],
        n=2,
        max_tokens=4,
        temperature=0.9,
        seed=3,
        grammar=grammar,
    )
    assert all(t in ("yes", "no") for t in texts(result))


def test_stream_chunks_say_their_choice(llm):
    whole = llm(PROMPTS[:3], max_tokens=12, temperature=0)
    parts: dict[int, str] = {}
    finishes = {}
    chunks = list(llm(PROMPTS[:3], max_tokens=12, temperature=0, stream=True))
    for chunk in chunks:
        choice = chunk["choices"][0]
        parts[choice["index"]] = parts.get(choice["index"], "") + choice["text"]
        if choice["finish_reason"] is not None:
            finishes[choice["index"]] = choice["finish_reason"]
    assert [parts[i] for i in range(3)] == texts(whole)
    assert finishes == {i: c["finish_reason"] for i, c in enumerate(whole["choices"])}
    assert "usage" in chunks[-1] and all("usage" not in c for c in chunks[:-1])


def test_a_suspended_parallel_stream_survives_another_request(llm):
    whole = texts(llm(PROMPTS[:2], max_tokens=12, temperature=0))
    single = llm(PROMPTS[3], max_tokens=8, temperature=0)["choices"][0]["text"]
    stream = llm(PROMPTS[:2], max_tokens=12, temperature=0, stream=True)
    parts = {0: "", 1: ""}
    for _ in range(3):
        c = next(stream)["choices"][0]
        parts[c["index"]] += c["text"]
    assert llm(PROMPTS[3], max_tokens=8, temperature=0)["choices"][0]["text"] == single  # parks it
    for chunk in stream:
        c = chunk["choices"][0]
        parts[c["index"]] += c["text"]
    assert [parts[0], parts[1]] == whole


def test_chat_n_choices(llm):
    messages = [{"role": "user", "content": "Name a fruit."}]
    result = llm.create_chat_completion(messages, n=3, max_tokens=12, temperature=0.9, seed=5)
    assert [c["index"] for c in result["choices"]] == [0, 1, 2]
    assert all(c["message"]["role"] == "assistant" and c["message"]["content"] for c in result["choices"])
    chunks = list(llm.create_chat_completion(messages, n=2, max_tokens=8, temperature=0, stream=True))
    roles = [c["choices"][0]["index"] for c in chunks if c["choices"][0]["delta"].get("role")]
    assert sorted(roles) == [0, 1]
    content = {0: "", 1: ""}
    for c in chunks:
        content[c["choices"][0]["index"]] += c["choices"][0]["delta"].get("content", "")
    assert content[0] == content[1]  # greedy: both choices of the one prompt agree


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(prompt=PROMPTS[0], n=0), ValueError, "n must be >= 1, got 0"),
        (dict(prompt=PROMPTS[0], n="2"), TypeError, "n must be an int, got str"),
        (dict(prompt=[]), ValueError, "empty list"),
        (dict(prompt=["a", [1, 2]]), TypeError, "not a mix"),
        (dict(prompt=[[1, 2], [3, "x"]]), TypeError, r"prompt\[1\] must be a list of token ids"),
    ],
)
def test_bad_requests_are_refused_before_decoding(llm, kwargs, exc, match):
    before = llm.n_evaluated
    with pytest.raises(exc, match=match):
        llm(max_tokens=4, **kwargs)
    assert llm.n_evaluated == before


def test_one_prompt_too_long_fails_the_request_up_front(smollm2_path):
    with Llama(smollm2_path, n_ctx=64, n_threads=2, progress=False) as small:
        n_ctx = small.n_ctx()  # llama.cpp may round the context up
        long = " ".join(["word"] * (n_ctx + 10))
        with pytest.raises(ValueError, match=f"the context holds only {n_ctx}"):
            small([PROMPTS[0], long], max_tokens=4)
        assert small.n_evaluated == 0  # nothing was decoded
        small([PROMPTS[0]], max_tokens=4)
        assert small.n_evaluated > 0


def test_slots_keep_their_prompts_for_later_requests(llm):
    llm.reset()
    llm(PROMPTS[:3], max_tokens=4, temperature=0)
    before = llm.n_evaluated
    again = llm(PROMPTS[1], max_tokens=1, temperature=0)  # the slot that answered it still holds it
    assert llm.n_evaluated - before == 1  # its last token, for the logits
    assert_same_or_near_tie(llm, PROMPTS[1], again["choices"][0]["text"], 1, limit=parallel_bound(llm))


def test_bad_requests_leave_the_counters_alone_and_good_ones_move_them(llm):
    llm.reset()

    def counters():
        return llm.n_evaluated, llm.engine.status().stats.prompt_tokens, llm.engine.status().stats.prompt_steps

    before = counters()
    bad_requests = [
        dict(prompt=PROMPTS[:2], n=0),
        dict(prompt=[PROMPTS[0], [1, "x"]]),
        dict(prompt=PROMPTS[:2], logprobs=-1),
        dict(prompt=PROMPTS[:2], max_tokens="4"),
        dict(prompt=[PROMPTS[0], [llm.n_vocab() + 5]]),
    ]
    for bad in bad_requests:
        with pytest.raises((ValueError, TypeError)):
            llm(**{"max_tokens": 2, **bad})
    assert counters() == before  # refused before anything was decoded
    llm(PROMPTS[:2], max_tokens=2, temperature=0)
    assert all(a > b for a, b in zip(counters(), before))  # a good request moves every one of them
