"""Damaged GGUF files give a clear Python exception: never an abort, a crash or a hang.

Every file of the corpus (tests/gguf_corpus.py) is loaded in a worker subprocess, so a file that
killed the process would show up as a crash instead of killing the test run."""

from __future__ import annotations

import collections

import gguf_corpus
import pytest
from conftest import REPO_ROOT

from llama_ffi.high import Llama


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    files = gguf_corpus.write_corpus(tmp_path_factory.mktemp("corpus"))
    return files, gguf_corpus.load_all(files, REPO_ROOT)


def test_no_file_crashes_or_hangs(corpus):
    files, outcomes = corpus
    counts = collections.Counter(o.kind for o in outcomes.values())
    print(f"\ncorpus: {len(files)} files, {dict(counts)}")
    bad = {name: o for name, o in outcomes.items() if o.kind in ("crash", "hang")}
    assert not bad, bad
    assert set(outcomes) == set(files)
    assert counts["error"] >= 60  # the corpus really is damaged: most files are refused


def test_the_unmodified_file_loads(corpus):
    assert corpus[1]["clean"].kind == "loaded"


def test_errors_are_value_errors_naming_the_file(corpus):
    files, outcomes = corpus
    for name, o in outcomes.items():
        if o.kind == "error":
            kind, _, message = o.detail.partition(" ")
            assert kind in ("RequestValueError", "ValueError", "FileNotFoundError"), (name, o.detail)
            assert str(files[name]) in message, (name, o.detail)


# What llama.cpp asserts on (each aborted the process before validation): the reason is named.
@pytest.mark.parametrize(
    "mutation, reason",
    [
        ("block_count_0", r"block_count is 0; llama.cpp needs 1 to 512 layers"),
        ("block_count_1000", r"block_count is 1000"),
        ("attn_norm_q8_0", r"'blk.0.attn_norm.weight' has type q8_0; norms and biases must be f32"),
        ("output_norm_f16", r"'output_norm.weight' has type f16"),
        ("ffn_norm_f16", r"'blk.1.ffn_norm.weight' has type f16"),
        ("vocab_duplicate_token", r"token 301 .* repeats token 300"),
        ("rms_eps_nan", r"layer_norm_rms_epsilon is nan"),
    ],
)
def test_assertions_llama_cpp_would_hit_are_named(tmp_path, mutation, reason):
    parts = gguf_corpus.clean_parts()
    gguf_corpus.PART_MUTATIONS[mutation](parts)
    path = gguf_corpus.write_parts(tmp_path / f"{mutation}.gguf", parts)
    with pytest.raises(ValueError, match=reason) as err:
        Llama(path, n_ctx=64, progress=False)
    assert str(path) in str(err.value)


def test_real_models_pass_validation(smollm2_path, gemma3_path):
    from llama_ffi.high.validate import check_model_file

    for path in (smollm2_path, gemma3_path):
        check_model_file(path)
