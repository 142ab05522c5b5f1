"""Embeddings and reranking against a real embedding model (all-MiniLM-L6-v2, converted with the
pinned tree's convert_hf_to_gguf.py) and an independent numpy BERT reference."""

from __future__ import annotations

import minilm
import numpy as np
import pytest

from llama_ffi import lib
from llama_ffi.high import Llama, LlamaEmbedding
from llama_ffi.high.embedding import normalize_rows, rerank_tokens

SENTENCES = [
    "The cat sits on the mat.",
    "A man is playing a guitar on stage.",
    "Quantum chromodynamics describes the strong interaction.",
    "Ünïcödé: café, naïve, Straße — 東京は日本の首都です。",
    "emoji 🦙🚀 and symbols ∑∫√",
    "a",
    "   ",
    "long " * 60 + "sentence about the weather in Paris, which is mild in spring.",
]


@pytest.fixture(scope="module")
def weights():
    return minilm.read_safetensors(minilm.model_dir() / "model.safetensors")


@pytest.fixture(scope="module")
def hf_tokenizer():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(minilm.model_dir()))


@pytest.fixture(scope="module")
def embedder(tree):
    with LlamaEmbedding(minilm.gguf_path(tree), n_threads=2, n_threads_batch=2) as m:
        yield m


def test_token_ids_match_the_reference_tokenizer(embedder, hf_tokenizer):
    for s in SENTENCES:
        assert embedder.tokenize(s) == hf_tokenizer(s)["input_ids"], s


def test_embeddings_match_the_numpy_reference(embedder, weights, hf_tokenizer):
    got = np.array(embedder.embed(SENTENCES))
    for s, v in zip(SENTENCES, got):
        ref = minilm.reference_embedding(weights, hf_tokenizer(s)["input_ids"])
        cosine = float(v @ ref / np.linalg.norm(v))
        assert cosine >= 0.999, (s, cosine)
        assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5)


def test_batching_equals_one_at_a_time(embedder):
    together = np.array(embedder.embed(SENTENCES))
    alone = np.array([embedder.embed(s) for s in SENTENCES])
    # the same math in other batch shapes: f16 weights, float32 sums in another order
    np.testing.assert_allclose(together, alone, atol=2e-4)


def test_more_inputs_than_sequences(tree):
    texts = [f"sentence number {i} about topic {i % 7}" for i in range(23)]
    with LlamaEmbedding(minilm.gguf_path(tree), n_seq_max=4, n_batch=64, n_ubatch=64) as small:
        got = np.array(small.embed(texts))
    with LlamaEmbedding(minilm.gguf_path(tree)) as big:
        want = np.array(big.embed(texts))
    assert got.shape == (23, 384)
    np.testing.assert_allclose(got, want, atol=2e-4)


@pytest.mark.parametrize("mode", [-1, 0, 1, 2, 3, 7, True, False])
def test_normalisation_modes_follow_their_formula(embedder, mode):
    raw = np.array(embedder.embed(SENTENCES[:3], normalize=-1), dtype=np.float64)
    got = np.array(embedder.embed(SENTENCES[:3], normalize=mode), dtype=np.float64)
    p = {True: 2, False: -1}.get(mode, mode) if isinstance(mode, bool) else mode
    if p == -1:
        want = raw
    elif p == 0:
        want = raw * (32760.0 / np.abs(raw).max(axis=1, keepdims=True))
    else:
        want = raw / (np.abs(raw) ** p).sum(axis=1, keepdims=True) ** (1.0 / p)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if p == 0:
        assert np.abs(got).max() == pytest.approx(32760.0, rel=1e-6)


def test_normalize_rejects_bad_modes():
    with pytest.raises(ValueError):
        normalize_rows(np.ones((1, 3)), -2)
    with pytest.raises(ValueError):
        normalize_rows(np.ones((1, 3)), 1.5)


def test_output_formats(embedder):
    d = embedder.create_embedding(SENTENCES[:3])
    assert d["object"] == "list" and [x["index"] for x in d["data"]] == [0, 1, 2]
    n_tokens = sum(len(embedder.tokenize(s)) for s in SENTENCES[:3])
    assert d["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    arr = embedder.create_embedding(SENTENCES[:3], output_format="array")
    assert arr == [x["embedding"] for x in d["data"]]
    npy = embedder.create_embedding(SENTENCES[:3], output_format="numpy")
    assert npy.shape == (3, 384) and npy.dtype == np.float32
    plus = embedder.create_embedding(SENTENCES[:3], output_format="json+")
    sim = np.array(plus["cosine_similarity"])
    unit = npy / np.linalg.norm(npy, axis=1, keepdims=True)
    np.testing.assert_allclose(sim, unit @ unit.T, atol=1e-5)
    assert np.allclose(np.diag(sim), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="output_format"):
        embedder.create_embedding("x", output_format="yaml")


def test_pooling_none_returns_per_token_vectors(tree):
    with LlamaEmbedding(minilm.gguf_path(tree), pooling_type=lib.LLAMA_POOLING_TYPE_NONE) as m:
        text = "The cat sits on the mat."
        vecs = np.array(m.embed(text, normalize=-1))
        assert vecs.shape == (len(m.tokenize(text)), 384)
    with LlamaEmbedding(minilm.gguf_path(tree)) as mean:
        pooled = np.array(mean.embed(text, normalize=-1))
    np.testing.assert_allclose(vecs.mean(axis=0), pooled, atol=1e-4)


def test_truncation(tree):
    with LlamaEmbedding(minilm.gguf_path(tree), n_batch=32, n_ubatch=32) as m:
        long_text = "word " * 100
        assert len(m.embed(long_text, truncate=True)) == 384
        with pytest.raises(ValueError, match=r"input 1 is too large to process: \d+ tokens"):
            m.embed(["short", long_text], truncate=False)


def test_bad_input(embedder, smollm2_path):
    assert embedder.embed([]) == []
    assert embedder.create_embedding([])["data"] == []
    with pytest.raises(TypeError):
        embedder.embed(["ok", 3])
    with pytest.raises(TypeError):
        embedder.embed(42)
    with pytest.raises(ValueError, match="rerank"):
        embedder.rank("q", ["d"])
    with Llama(smollm2_path, n_ctx=64, progress=False) as chat_model:
        with pytest.raises(ValueError, match="embeddings=True"):
            chat_model.embed("hello")
    assert len(embedder.embed("still works")) == 384


def test_rank_scores_one_per_document(tree, weights, hf_tokenizer):
    query = "What is the capital of France?"
    docs = [
        "Paris is the capital of France.",
        "Bananas are yellow.",
        "The Eiffel Tower is in Paris.",
        "Berlin is in Germany.",
    ]
    with LlamaEmbedding(minilm.rank_gguf_path(tree), pooling_type=lib.LLAMA_POOLING_TYPE_RANK) as m:
        scores = m.rank(query, docs)
        assert len(scores) == len(docs) and all(isinstance(s, float) for s in scores)
        assert m.rank(query, docs) == scores  # deterministic
        assert m.rank(query, []) == []
        for doc, score in zip(docs, scores):
            # llama.cpp's layout: [CLS] query [SEP] ... document [SEP], all token type 0
            ids = rerank_tokens(m.tokenizer, m._model.ptr, query, doc)
            q, d = hf_tokenizer(query)["input_ids"], hf_tokenizer(doc)["input_ids"]
            assert ids[: len(q)] == q and ids[-len(d) + 1 :] == d[1:]
            assert score == pytest.approx(minilm.reference_rank(weights, ids), abs=2e-3)
        assert len(set(scores)) == len(scores)
