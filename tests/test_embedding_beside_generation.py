"""Embeddings go through the engine: computed in idle slots between its steps, they neither wait for
nor disturb requests generating in other slots; a Llama made with ``embeddings=True`` generates too
(llama-cpp-python's ``Llama(embedding=True)`` does), and an encoder that cannot generate says so."""

from __future__ import annotations

import threading

import minilm
import numpy as np
import pytest

from llama_ffi import lib, testing
from llama_ffi.high import Llama, LlamaEmbedding

PROMPT = "The three primary colours are"
TEXTS = ["A cat sits on the mat.", "Quantum chromodynamics describes the strong force.", "Paris in spring"]
PARAMS = dict(n_ctx=1024, n_batch=256, n_seq_max=2, kv_unified=True, n_threads=2, progress=False)


def unit(rows) -> np.ndarray:
    a = np.asarray(rows, dtype=np.float64)
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def embedder(smollm2_path):
    with Llama(smollm2_path, embeddings=True, pooling_type=lib.LLAMA_POOLING_TYPE_MEAN, **PARAMS) as llm:
        yield llm


def test_a_llama_made_for_embeddings_generates_like_one_that_is_not(embedder, smollm2_path):
    assert len(embedder.embed(TEXTS[0])) == embedder.n_embd  # its cells go with it
    got = embedder.create_completion(PROMPT, max_tokens=24, temperature=0)["choices"][0]["text"]
    with Llama(smollm2_path, **PARAMS) as plain:  # the same context shapes, embeddings off while generating
        testing.assert_same_or_near_tie(plain, PROMPT, got, 24)


def test_embeddings_beside_a_stream_neither_wait_nor_disturb_it(embedder):
    alone_text = embedder.create_completion(PROMPT, max_tokens=48, temperature=0)["choices"][0]["text"]
    alone_vectors = unit(embedder.embed(TEXTS))

    stream = embedder.create_completion(PROMPT, max_tokens=48, temperature=0, stream=True)
    pieces = [next(stream)["choices"][0]["text"]]  # the request holds its slot until the stream is read
    beside: dict[str, np.ndarray] = {}
    worker = threading.Thread(target=lambda: beside.setdefault("v", unit(embedder.embed(TEXTS))))
    worker.start()
    worker.join(120)  # before, embeddings waited for every request to end: this one never would
    assert not worker.is_alive(), "embed waited for an unread stream"
    pieces += [chunk["choices"][0]["text"] for chunk in stream]

    # other sequences' cells beside it may change the last bits of a sum: the same text, or a near tie
    testing.assert_same_or_near_tie(embedder, PROMPT, "".join(pieces), 48)
    testing.assert_same_or_near_tie(embedder, PROMPT, alone_text, 48)
    cosines = (beside["v"] * alone_vectors).sum(axis=1)
    assert cosines.min() > 0.9999, cosines

    # the stream's slot kept its cache: the same prompt again decodes only its last token
    before = embedder.n_evaluated
    embedder.create_completion(PROMPT, max_tokens=1, temperature=0)
    assert embedder.n_evaluated - before <= 2


def test_an_encoder_refuses_to_generate(tree):
    with LlamaEmbedding(minilm.gguf_path(tree)) as encoder:
        with pytest.raises(ValueError, match="cannot generate text"):
            encoder.create_completion("hello", max_tokens=4)
        with pytest.raises(ValueError, match="cannot generate text"):
            next(encoder.generate(encoder.tokenize("hello")))
        assert len(encoder.embed("still embeds")) == 384
