"""DRAFT_MTP against llama.cpp's real MTP graph, on a tiny synthetic GLM-4.5-style model with one
NextN block (tests/tiny_mtp.py): identical output to plain decoding, drafts that are accepted
when the block predicts well, an external MTP file, and errors at construction."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_mtp import TinyMtpConfig, write_gguf

from llama_ffi.high import Llama
from llama_ffi.high.speculative import SpecConfig, SpeculativeType, window
from llama_ffi.testing import assert_same_or_near_tie, assert_same_or_sampling_flip

N_CTX = 256


def _mtp(path, draft_model_path=None, n_max=4, **kw):
    cfg = SpecConfig(type=SpeculativeType.DRAFT_MTP, draft_n_max=n_max, draft_model_path=draft_model_path)
    return Llama(path, n_ctx=N_CTX, n_threads=2, progress=False, speculative=cfg, **kw)


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    """Random weights: the MTP block's drafts are mostly wrong (rejections, rollbacks)."""
    return write_gguf(tmp_path_factory.mktemp("mtp") / "tiny-mtp.gguf", TinyMtpConfig())


@pytest.fixture(scope="module")
def bigram_model(tmp_path_factory):
    """The MTP block computes the model's own next-token function: every draft is right."""
    return write_gguf(tmp_path_factory.mktemp("mtp") / "tiny-mtp-bigram.gguf", TinyMtpConfig(bigram=True))


@pytest.fixture(scope="module")
def pair(random_model):
    with Llama(random_model, n_ctx=N_CTX, n_threads=2, progress=False) as plain, _mtp(random_model) as mtp:
        yield plain, mtp


def _generate(llm, prompt, **kw) -> list[int]:
    llm.reset()
    return list(llm.generate(prompt, **kw))


def _mtp_sequence(llm):
    """The MTP drafter's record of the main sequence (which hidden states it saw, which pairs it fed)."""
    return llm.engine.speculation.drafters.sequences[llm.main_seq]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.lists(st.integers(3, 319), min_size=1, max_size=40), n=st.integers(1, 60))
def test_greedy_equals_plain_or_a_near_tie(pair, prompt, n):
    plain, mtp = pair
    got = _generate(mtp, [1] + prompt, max_tokens=n, temperature=0)
    assert_same_or_near_tie(plain, [1] + prompt, got, n)
    stats = mtp.last_speculative_stats
    assert stats.type == "DRAFT_MTP" and stats.generated_tokens == len(got)
    if n >= 2 + window.MIN_DRAFT and len(got) > 1:  # room for a draft worth verifying
        assert stats.draft_calls > 0 and stats.drafted_tokens > 0
    assert mtp.context.seq_pos_max(mtp.main_seq) + 1 == len(mtp.tokens)


@pytest.mark.parametrize("seed", [3, 11])
def test_seeded_sampling_equals_plain_or_a_sampling_flip(pair, seed):
    plain, mtp = pair
    kw = dict(max_tokens=48, temperature=1.0, top_k=50, seed=seed)
    prompt = [1, 300, 301, 302]
    got, want = _generate(mtp, prompt, **kw), _generate(plain, prompt, **kw)
    assert_same_or_sampling_flip(plain, prompt, got, want, 1.0)
    assert mtp.last_speculative_stats.drafted_tokens > 0


def test_prefix_reuse_and_streaming(pair):
    plain, mtp = pair
    prompt = [1, 310, 311, 312, 313]
    first = mtp(prompt, max_tokens=20, temperature=0)["choices"][0]["text"]
    # a longer prompt reuses the cached one: only the new suffix is evaluated, and the MTP
    # cache is cut where the target's is
    before = mtp.n_evaluated
    longer = prompt + [314, 315]
    mtp.eval_prompt(longer)
    assert mtp.n_evaluated - before == 2
    assert _mtp_sequence(mtp).seen == longer  # the target's hidden states of every position
    got = "".join(c["choices"][0]["text"] for c in mtp(longer, max_tokens=20, temperature=0, stream=True))
    assert_same_or_near_tie(plain, longer, got, 20)
    assert_same_or_near_tie(plain, prompt, first, 20)


def test_a_good_mtp_block_has_its_drafts_accepted(bigram_model):
    prompt = [1, 300, 301, 302, 303, 304, 305]
    with Llama(bigram_model, n_ctx=N_CTX, n_threads=2, progress=False) as plain:
        with _mtp(bigram_model) as mtp:
            want = _generate(mtp, prompt, max_tokens=60, temperature=0)
            assert_same_or_near_tie(plain, prompt, want, 60)
            stats = mtp.last_speculative_stats
    assert stats.drafted_tokens >= 40 and stats.accepted_tokens == stats.drafted_tokens
    assert stats.rollbacks == 0 and stats.verify_batches < len(want) // 3


def test_external_mtp_file(bigram_model, tmp_path):
    external = write_gguf(tmp_path / "mtp-only.gguf", TinyMtpConfig(bigram=True), mtp_only=True)
    prompt = [1, 300, 301, 302, 303]
    with _mtp(bigram_model) as builtin, _mtp(bigram_model, draft_model_path=external) as separate:
        want = _generate(builtin, prompt, max_tokens=40, temperature=0)
        assert _generate(separate, prompt, max_tokens=40, temperature=0) == want
        assert separate.last_speculative_stats.accepted_tokens == builtin.last_speculative_stats.accepted_tokens > 0


def test_errors_at_construction(random_model, smollm2_path, tiny_model_path):
    with pytest.raises(ValueError, match="NextN/MTP layers"):
        Llama(smollm2_path, n_ctx=N_CTX, progress=False, speculative=SpecConfig(type="draft-mtp"))
    with pytest.raises(ValueError, match="has no NextN/MTP layers"):
        _mtp(random_model, draft_model_path=tiny_model_path)
    with pytest.raises(FileNotFoundError, match="draft model not found"):
        _mtp(random_model, draft_model_path="/nonexistent/mtp.gguf")
    with pytest.raises(ValueError, match=r"draft_n_max \(64\) must be below n_batch \(64\)"):
        _mtp(random_model, n_max=64, n_batch=64)


def test_close_and_garbage_collection(random_model):
    import gc

    llm = _mtp(random_model)
    llm([1, 300, 301], max_tokens=8, temperature=0)
    llm.close()
    llm.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        llm([1, 300], max_tokens=2)
    dropped = _mtp(random_model)  # never closed: freed by the garbage collector
    dropped([1, 300, 301], max_tokens=8, temperature=0)
    del dropped
    gc.collect()


def test_p_min_stops_unconfident_drafts(bigram_model):
    prompt = [1, 300, 301, 302, 303]
    cfg = SpecConfig(type=SpeculativeType.DRAFT_MTP, draft_n_max=4, draft_p_min=1.0)
    with (
        Llama(bigram_model, n_ctx=N_CTX, n_threads=2, progress=False) as plain,
        Llama(bigram_model, n_ctx=N_CTX, n_threads=2, progress=False, speculative=cfg) as strict,
    ):
        assert_same_or_near_tie(plain, prompt, _generate(strict, prompt, max_tokens=30, temperature=0), 30)
        assert strict.last_speculative_stats.drafted_tokens == 0  # no token is certain


def test_load_state_resyncs_the_mtp_cache(bigram_model):
    """The MTP cache mirrors the target's position by position: after load_state (here with a
    shorter history in between, which left the MTP cache with a gap) it is fed again."""
    prompt = [1] + list(range(280, 320))
    with _mtp(bigram_model) as mtp, Llama(bigram_model, n_ctx=N_CTX, n_threads=2, progress=False) as plain:
        mtp.eval(prompt)
        state = mtp.save_state()
        mtp.reset()
        mtp([1, 310], max_tokens=1, temperature=0)
        mtp.load_state(state)
        got = list(mtp.generate(mtp.tokens, max_tokens=40, temperature=0))
        assert_same_or_near_tie(plain, prompt, got, 40)
        stats = mtp.last_speculative_stats
        assert stats.accepted_tokens == stats.drafted_tokens > 0
        fed = _mtp_sequence(mtp).fed
        assert len(fed) >= len(prompt) and fed == mtp.tokens[: len(fed)]


def test_a_stream_keeps_its_hidden_states_while_other_requests_run(bigram_model):
    prompt = [1, 300, 301, 302, 303]
    with _mtp(bigram_model) as mtp:
        want = mtp(prompt, max_tokens=40, temperature=0)["choices"][0]["text"]
        mtp.reset()
        stream = mtp(prompt, max_tokens=40, temperature=0, stream=True)
        head = [next(stream) for _ in range(3)]
        mtp.reset()
        mtp([1, 310], max_tokens=2, temperature=0)
        rest = list(stream)
        assert "".join(c["choices"][0]["text"] for c in head + rest) == want
        stats = mtp.last_speculative_stats
        # the requests in between ran in other sequences: every draft of the stream is accepted
        assert stats.accepted_tokens == stats.drafted_tokens > 0 and stats.rollbacks == 0


def test_a_draft_file_names_its_engine_as_llama_cpp_reads_it(bigram_model, tmp_path, tiny_model_path):
    """Without --spec-type, llama.cpp takes a draft with a NextN block for MTP (and so does the
    router, for the mtp-*.gguf beside a model in --models-dir)."""
    import subprocess
    import sys
    from pathlib import Path

    from llama_ffi.high.speculative.config import type_from_file
    from llama_ffi.server.router.catalog import from_models_dir

    external = write_gguf(tmp_path / "mtp-only.gguf", TinyMtpConfig(bigram=True), mtp_only=True)
    assert type_from_file(external) is type_from_file(bigram_model) is SpeculativeType.DRAFT_MTP
    assert type_from_file(tiny_model_path) is None and type_from_file(tmp_path / "none.gguf") is None
    command = [sys.executable, "-m", "llama_ffi", "complete", "1 2 3", "-m", str(bigram_model), "-md", str(external)]
    out = subprocess.run(
        [*command, "-n", "16", "--temp", "0"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and "speculative DRAFT_MTP: 16 tokens" in out.stderr, out.stderr

    folder = tmp_path / "models" / "glm"
    folder.mkdir(parents=True)
    (folder / "model.gguf").symlink_to(bigram_model)
    (folder / "mtp-model.gguf").symlink_to(external)
    (entry,) = from_models_dir(folder.parent)
    assert entry.flags == ("--model", str(folder / "model.gguf"), "--model-draft", str(folder / "mtp-model.gguf"))
