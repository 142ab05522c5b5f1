"""Speculative decoding: identical output to plain decoding (greedy and seeded sampling), the
drafters' rules, stats, and errors at construction."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_ffi import lib
from llama_ffi.high import Llama, LlamaGrammar
from llama_ffi.high.speculative import SpecConfig, SpeculativeType
from llama_ffi.high.speculative.ngram import NgramIndex, NgramMapK, NgramMapK4V
from llama_ffi.testing import assert_same_or_near_tie, assert_same_or_sampling_flip, greedy_trace

N_CTX = 1024
# SmolLM2 continues this with more methods of the same shape: long runs an n-gram drafter can copy
REPETITIVE = (
    "class Vector:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "    def add(self, other):\n        return Vector(self.x + other.x, self.y + other.y)\n\n"
    "    def sub(self, other):\n        return Vector(self.x - other.x, self.y - other.y)\n\n"
    "    def mul(self, other):\n"
)
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "and",
    "then",
    "it",
    "ran",
    "to",
    "see",
    "dog",
    "red",
    "blue",
    "one",
    "two",
    "three",
    "{",
    "}",
    '"key":',
    "1,",
    "def",
    "f(x):",
    "return",
    "\n",
]


@pytest.fixture(scope="module")
def draft_path(smollm2_path, tmp_path_factory):
    from tools.draft_model import cut_layers

    return cut_layers(smollm2_path, tmp_path_factory.mktemp("draft") / "smollm2-6-layers.gguf", 6)


def _llama(path, **kw):
    return Llama(path, n_ctx=N_CTX, n_threads=2, **kw)


@pytest.fixture(scope="module")
def plain(smollm2_path):
    with _llama(smollm2_path) as llm:
        yield llm


@pytest.fixture(scope="module")
def engines(smollm2_path, draft_path):
    """One Llama per engine; short n-gram keys so that short test outputs draft too. Draft
    models: SmolLM2 itself (its drafts are the target's own choices: accepted) and its first six
    layers (a poor drafter: rejections)."""
    configs = {
        "ngram-k": SpecConfig(type=SpeculativeType.NGRAM_MAP_K, ngram_size_n=3, ngram_size_m=8),
        "ngram-k4v": SpecConfig(type=SpeculativeType.NGRAM_MAP_K4V, ngram_size_n=2, ngram_size_m=4),
        "draft": SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=smollm2_path, draft_n_max=4),
        "draft-cut": SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=draft_path, draft_n_max=4),
    }
    made = {name: _llama(smollm2_path, speculative=cfg) for name, cfg in configs.items()}
    yield made
    for llm in made.values():
        llm.close()


def _tokens(llm, prompt, **kw):
    llm.reset()
    out = list(llm.generate(llm.tokenize(prompt) if isinstance(prompt, str) else prompt, **kw))
    return out


def _cache_consistent(llm) -> bool:
    return llm.context.seq_pos_max(llm.main_seq) + 1 == len(llm.tokens)


# ---- identity with plain decoding ------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ngram-k", "ngram-k4v", "draft"])
def test_greedy_repetitive_prompt_equals_plain_or_a_near_tie_and_speculates(plain, engines, name):
    llm = engines[name]
    want = plain(REPETITIVE, max_tokens=96, temperature=0)
    got = llm(REPETITIVE, max_tokens=96, temperature=0)
    assert_same_or_near_tie(plain, REPETITIVE, got["choices"][0]["text"], 96)
    assert got["usage"]["prompt_tokens"] == want["usage"]["prompt_tokens"]
    stats = llm.last_speculative_stats
    assert stats.drafted_tokens > 0 and stats.accepted_tokens > 0
    assert stats.accepted_tokens <= stats.drafted_tokens
    assert stats.generated_tokens == got["usage"]["completion_tokens"]
    assert _cache_consistent(llm)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=24), repeat=st.integers(1, 3), n=st.integers(1, 48))
def test_greedy_generated_prompts_equal_plain_or_a_near_tie(plain, engines, words, repeat, n):
    prompt = plain.tokenize(" ".join(words * repeat))
    steps = greedy_trace(plain, prompt, n)  # the reference of every engine's output
    for llm in engines.values():
        got = _tokens(llm, prompt, max_tokens=n, temperature=0)
        assert_same_or_near_tie(plain, prompt, got, n, steps=steps)
        assert _cache_consistent(llm)


def test_prompts_like_the_generated_ones_draft_and_roll_back(plain, engines):
    """The property above must not pass by never drafting: prompts of its kind make every engine
    draft, and some drafts are rejected (the rollback path runs), with the same output checks."""
    drafted, rolled_back = dict.fromkeys(engines, 0), 0
    for words, repeat, n in [
        (["the", "cat", "sat", "on", "a", "mat", "and", "then"], 3, 48),
        (["{", '"key":', "1,", "}", "\n"], 3, 40),
        (["def", "f(x):", "return", "\n"], 2, 48),
    ]:
        prompt = plain.tokenize(" ".join(words * repeat))
        steps = greedy_trace(plain, prompt, n)
        for name, llm in engines.items():
            got = _tokens(llm, prompt, max_tokens=n, temperature=0)
            assert_same_or_near_tie(plain, prompt, got, n, steps=steps)
            stats = llm.last_speculative_stats
            drafted[name] += stats.drafted_tokens
            rolled_back += stats.rollbacks
    assert all(v > 0 for v in drafted.values()), drafted
    assert rolled_back > 0


@pytest.mark.parametrize("name", ["ngram-k", "draft"])
@pytest.mark.parametrize("seed", [1, 7])
def test_seeded_sampling_equals_plain_sampling(plain, engines, name, seed):
    kw = dict(max_tokens=64, temperature=0.9, top_k=40, top_p=0.95, seed=seed)
    want = _tokens(plain, REPETITIVE, **kw)
    got = _tokens(engines[name], REPETITIVE, **kw)
    assert_same_or_sampling_flip(plain, plain.tokenize(REPETITIVE), got, want, 0.9)
    assert engines[name].last_speculative_stats.drafted_tokens > 0


# ---- the rest of the completion features on top of speculation -------------------------------------
def test_streaming_equals_non_streaming(engines, plain):
    llm = engines["ngram-k"]
    whole = llm(REPETITIVE, max_tokens=80, temperature=0)["choices"][0]["text"]
    chunks = list(llm(REPETITIVE, max_tokens=80, temperature=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("name", ["ngram-k", "draft"])
def test_stop_string_and_max_tokens(plain, engines, name):
    llm = engines[name]
    llm.reset()  # both runs evaluate the prompt in one batch
    full = llm(REPETITIVE, max_tokens=80, temperature=0)["choices"][0]["text"]
    assert_same_or_near_tie(plain, REPETITIVE, full, 80)
    stop = full[len(full) // 2 : len(full) // 2 + 5]
    llm.reset()
    got = llm(REPETITIVE, max_tokens=80, temperature=0, stop=stop)
    assert got["choices"][0]["text"] == full[: full.index(stop)]
    assert got["choices"][0]["finish_reason"] == "stop"
    assert _cache_consistent(llm)
    for n in (1, 2, 5, 17):
        out = llm(REPETITIVE, max_tokens=n, temperature=0)
        assert out["usage"]["completion_tokens"] == n
        assert out["choices"][0]["finish_reason"] == "length"


def test_grammar_constrained_output_is_identical(plain, engines):
    grammar = LlamaGrammar.from_string('root ::= "[" item ("," item)* "]"\nitem ::= [0-9]+')
    prompt = "A JSON list of the numbers one to twenty: "
    want = plain(prompt, max_tokens=48, temperature=0, grammar=grammar)
    for name in ("ngram-k", "draft"):
        got = engines[name](prompt, max_tokens=48, temperature=0, grammar=grammar)
        assert got["choices"][0]["text"] == want["choices"][0]["text"], name
    text = want["choices"][0]["text"]
    if want["choices"][0]["finish_reason"] == "stop":
        json.loads(text)


def test_logprobs_and_processors_with_speculation(plain, engines):
    def ban_digit_one(ids, logits):
        logits[plain.tokenize("1", add_bos=False)[0]] = -1e9
        return logits

    kw = dict(max_tokens=40, temperature=0, logprobs=2, logits_processor=[ban_digit_one])
    plain.reset()  # fresh caches on both: the sequence's cells in order (no other slot's in between)
    engines["ngram-k"].reset()
    want = plain(REPETITIVE, **kw)
    got = engines["ngram-k"](REPETITIVE, **kw)
    text = got["choices"][0]["text"]
    if text != want["choices"][0]["text"]:  # a near tie flipped: explained, or a failure
        assert_same_or_near_tie(plain, REPETITIVE, text, 40, processors=[ban_digit_one])
        return
    a, b = got["choices"][0]["logprobs"], want["choices"][0]["logprobs"]
    assert a["tokens"] == b["tokens"]
    assert a["token_logprobs"] == pytest.approx(b["token_logprobs"], abs=2e-2)


def test_chat_with_speculation(plain, engines):
    messages = [{"role": "user", "content": "List the days of the week, one per line, twice."}]
    want = plain.create_chat_completion(messages, max_tokens=64, temperature=0)
    got = engines["ngram-k"].create_chat_completion(messages, max_tokens=64, temperature=0)
    if got["choices"][0]["message"] != want["choices"][0]["message"]:
        from llama_ffi.high.chat.completion import model_template

        prompt = plain.tokenize(model_template(plain, None).render(messages), add_bos=False, special=True)
        raw = engines["ngram-k"](prompt, max_tokens=64, temperature=0)["choices"][0]["text"]
        assert_same_or_near_tie(plain, prompt, raw, 64)
    assert got["choices"][0]["message"]["role"] == "assistant"


def test_prefix_reuse_after_speculation(plain, engines):
    llm = engines["draft"]
    first = llm(REPETITIVE, max_tokens=30, temperature=0)["choices"][0]["text"]
    follow = REPETITIVE + first + " and"
    before = llm.n_evaluated
    got = llm(follow, max_tokens=20, temperature=0)["choices"][0]["text"]
    assert_same_or_near_tie(plain, follow, got, 20)
    assert llm.n_evaluated - before < len(llm.tokenize(follow))  # the cached prefix was reused


def test_stats_are_coherent(engines):
    llm = engines["ngram-k"]
    before = llm.engine.status().stats
    out = llm(REPETITIVE, max_tokens=96, temperature=0)
    s = llm.last_speculative_stats
    after = llm.engine.status().stats  # the engine's totals (llama-server's spec_decode metrics)
    assert after.drafts - before.drafts == s.draft_calls > 0
    assert after.draft_tokens - before.draft_tokens == s.drafted_tokens
    assert after.accepted_draft_tokens - before.accepted_draft_tokens == s.accepted_tokens
    assert s.type == "NGRAM_MAP_K"
    assert 0.0 < s.acceptance_rate <= 1.0
    assert s.mean_accepted_length == pytest.approx(s.accepted_tokens / s.draft_calls)
    assert s.rollbacks <= s.draft_calls == s.verify_batches
    assert s.ttft_s > 0 and s.generation_s > 0 and s.tokens_per_second > 0
    # each verification emits its accepted tokens plus one: fewer decodes than tokens
    assert s.generated_tokens == out["usage"]["completion_tokens"]
    assert s.as_dict()["acceptance_rate"] == s.acceptance_rate
    assert "accepted" in s.summary()


# ---- drafters --------------------------------------------------------------------------------------
def test_ngram_map_k_drafts_what_followed_the_most_recent_key():
    d = NgramMapK(size_n=2, size_m=3, min_hits=1)
    history = [5, 6, 7, 8, 9, 5, 6, 1, 2, 5, 6]
    assert d.draft(history, 10) == [1, 2, 5]  # the later occurrence of (5, 6) wins
    assert d.draft(history, 2) == [1, 2]  # capped by n_max
    assert d.draft([1, 2, 3, 4], 10) == []  # (3, 4) never seen before
    d.accept(0)
    # the value runs into the present: the copy continues over its own output (period 2)
    assert d.draft([1, 2, 3, 4, 3, 4], 10) == [3, 4, 3]
    d.accept(3)
    long = NgramMapK(size_n=2, size_m=7, min_hits=1)
    assert long.draft([9, 1, 2, 3, 1, 2, 3, 1, 2], 10) == [3, 1, 2, 3, 1, 2, 3]
    assert long.draft([9, 1, 2, 3, 1, 2, 3, 1, 2], 4) == [3, 1, 2, 3]


def test_ngram_map_k_min_hits_and_shrinking_after_rejection():
    d = NgramMapK(size_n=1, size_m=4, min_hits=2)
    assert d.draft([7, 1, 2, 3, 4, 7], 4) == []  # one earlier hit < min_hits
    history = [7, 1, 2, 3, 4, 7, 1, 2, 3, 4, 7]
    assert d.draft(history, 4) == [1, 2, 3, 4]
    d.accept(0)  # all rejected: next time 1 token
    assert d.draft(history, 4) == [1]
    d.accept(1)  # fully accepted: back to m
    assert d.draft(history, 4) == [1, 2, 3, 4]


def test_ngram_map_k4v_drafts_only_a_dominant_value():
    d = NgramMapK4V(size_n=1, size_m=2, min_hits=1, max_values=4)
    # after key 9: (1, 2) twice, (3, 4) once -> 2 >= 2 * 1: dominant
    assert d.draft([9, 1, 2, 9, 3, 4, 9, 1, 2, 0, 9], 2) == [1, 2]
    # (1, 2) once, (3, 4) once: no value dominates
    assert d.draft([9, 1, 2, 9, 3, 4, 0, 9], 2) == []
    # max_values=1: only the most recent value is counted
    one = NgramMapK4V(size_n=1, size_m=2, min_hits=1, max_values=1)
    assert one.draft([9, 1, 2, 9, 3, 4, 0, 9], 2) == [3, 4]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=0, max_size=80),
    st.lists(st.integers(1, 6), min_size=1, max_size=10),
    st.lists(st.integers(0, 5), min_size=1, max_size=40),
)
def test_ngram_index_grown_step_by_step_equals_one_built_at_once(tokens, steps, other):
    # The engine appends to one history list and looks up after each step; the index extends by
    # the new tokens only. A history that does not continue the indexed one (another request on
    # the drafter) starts it over.
    grown, history, i = NgramIndex(3), [], 0
    for step in steps * 20:
        history.extend(tokens[i : i + step])
        i += step
        grown.extend_to(history)
    whole = NgramIndex(3)
    whole.extend_to(list(tokens))
    assert grown.history == tokens and grown.positions == whole.positions
    restarted = [t + 6 for t in other]  # shares no token with the indexed history
    grown.extend_to(restarted)
    fresh = NgramIndex(3)
    fresh.extend_to(restarted)
    assert grown.history == restarted and grown.positions == fresh.positions
    for key in fresh.positions:
        assert grown.earlier(key) == [p for p in fresh.positions[key] if p < len(restarted) - 3]


# ---- errors at construction --------------------------------------------------------------------------
def test_vocabulary_mismatch_is_refused(smollm2_path, tiny_model_path):
    with pytest.raises(ValueError, match="cannot draft for this model: vocabulary"):
        _llama(smollm2_path, speculative=SpecConfig(type="draft", draft_model_path=tiny_model_path))


def test_draft_longer_than_batch_is_refused(smollm2_path, draft_path):
    cfg = SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=draft_path, draft_n_max=64)
    with pytest.raises(ValueError, match=r"draft_n_max \(64\) must be below n_batch \(64\)"):
        Llama(smollm2_path, n_ctx=256, n_batch=64, speculative=cfg)
    with pytest.raises(ValueError, match=r"ngram_size_m \(48\) must be below n_batch \(32\)"):
        Llama(smollm2_path, n_ctx=256, n_batch=32, speculative=SpecConfig())


def test_missing_draft_file(smollm2_path, tmp_path):
    with pytest.raises(FileNotFoundError, match="draft model not found"):
        _llama(smollm2_path, speculative=SpecConfig(type="draft", draft_model_path=tmp_path / "nope.gguf"))
    with pytest.raises(ValueError, match="needs draft_model_path"):
        _llama(smollm2_path, speculative=SpecConfig(type="draft"))


@pytest.mark.parametrize(
    "kind",
    [
        SpeculativeType.NGRAM_CACHE,
        SpeculativeType.DRAFT_EAGLE3,
        SpeculativeType.NGRAM_MOD,
        SpeculativeType.NGRAM_SIMPLE,
    ],
)
def test_unimplemented_type_names_itself(smollm2_path, kind):
    if kind == SpeculativeType.DRAFT_EAGLE3:  # a drafter of its own: its missing file is named first
        with pytest.raises(ValueError, match=f"{kind.name} needs draft_model_path .* no engine"):
            _llama(smollm2_path, speculative=SpecConfig(type=kind))
        return
    with pytest.raises(NotImplementedError, match=kind.name):
        _llama(smollm2_path, speculative=SpecConfig(type=kind))


def test_bad_config_values(smollm2_path):
    with pytest.raises(ValueError, match="unknown speculative type"):
        _llama(smollm2_path, speculative=SpecConfig(type="lookahead"))
    with pytest.raises(ValueError, match="ngram_size_n must be >= 1"):
        _llama(smollm2_path, speculative=SpecConfig(ngram_size_n=0))
    with pytest.raises(ValueError, match="draft_p_min must be <= 1.0"):
        _llama(smollm2_path, speculative=SpecConfig(draft_p_min=1.5))
    with pytest.raises(TypeError, match="SpecConfig"):
        _llama(smollm2_path, speculative={"type": "ngram-map-k"})


def test_no_amx_in_our_build():
    # ggml's AMX matmul crashes on Q4_1 batches at this pin; the build turns it off (native_build)
    assert lib.ggml_cpu_has_amx_int8() == 0


@pytest.mark.parametrize("name", ["ngram-k", "draft"])
def test_speculation_after_load_state(plain, engines, name):
    llm = engines[name]
    llm.reset()
    llm.eval(llm.tokenize(REPETITIVE))
    state = llm.save_state()
    llm.reset()
    llm("Hello", max_tokens=3, temperature=0)  # the drafter now follows another history
    llm.load_state(state)
    got = list(llm.generate(llm.tokens, max_tokens=64, temperature=0))
    assert_same_or_near_tie(plain, llm.tokenize(REPETITIVE), got, 64)
    assert llm.last_speculative_stats.accepted_tokens > 0
    assert _cache_consistent(llm)


def test_a_draft_model_whose_cells_fill_up_keeps_drafting(smollm2_path, plain):
    """The draft context keeps every slot's history, also of idle slots whose target cells were
    evicted: when its cells are full it starts over rather than stop drafting for good."""
    spec = SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=smollm2_path, draft_n_max=4)
    with Llama(smollm2_path, n_ctx=256, n_threads=2, progress=False, speculative=spec) as llm:
        drafted = []
        for i in range(4):  # four slots' histories of ~90 cells each: over the 256 cells by the third
            prompt = f"Item {i}: " + ", ".join(f"{i}{k}" for k in range(24)) + ","
            got = llm(prompt, max_tokens=40, temperature=0)["choices"][0]["text"]
            assert_same_or_near_tie(plain, prompt, got, 40)
            drafted.append(llm.last_speculative_stats.drafted_tokens)
        assert all(d > 0 for d in drafted), drafted
