"""One typed request (``high.request.GenerationRequest``) from every edge: llama-cpp-python's keyword
arguments and the server's bodies convert into it once, to the same values, and it cannot change on
its way to the sampler. A vocab-only model is enough: no decoding here."""

from __future__ import annotations

import dataclasses

import pytest

from llama_ffi.high import Llama, RequestTypeError
from llama_ffi.high.request import GenerationRequest, from_keywords
from llama_ffi.high.sampling_fields import FIELDS


@pytest.fixture(scope="module")
def vocab(smollm2_path):
    with Llama(smollm2_path, vocab_only=True, progress=False) as llm:
        yield llm


def test_keywords_become_one_frozen_request(vocab):
    request = from_keywords(
        vocab,
        {"temp": 0.3, "top_k": 7, "stop": "END", "max_tokens": 9, "return_progress": True, "seed": 5, "n": 2},
    )
    assert request.sampling.temperature == 0.3 and request.sampling.top_k == 7 and request.sampling.seed == 5
    assert (request.stop, request.max_tokens, request.progress, request.n) == (("END",), 9, True, 2)
    assert request.sampling.penalty_last_n == vocab.last_n_tokens_size  # the Llama's default
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.max_tokens = 10  # type: ignore[misc]
    with pytest.raises(RequestTypeError, match="unknown sampling parameter.*top_kk"):
        from_keywords(vocab, {"top_kk": 3})
    assert from_keywords(vocab, {}, max_tokens=None).max_tokens is None  # a chat's default


def test_the_server_converts_each_field_as_the_library_does(vocab):
    """Every declared sampling field, sent under llama-server's key, lands in the same place as the
    library's keyword (a field left out of the conversion shows here)."""
    pytest.importorskip("fastapi")
    from llama_ffi.server import params
    from llama_ffi.server.options import ServerOptions
    from llama_ffi.server.schemas import ChatRequest, CompletionRequest

    vocab.set_seed(-1)  # no seed chain: each conversion below would otherwise draw the next seed
    values = {f: (3 if f.kind is int else 0.5) for f in FIELDS}
    values = {f: (min(v, f.high) if f.high is not None else v) for f, v in values.items()}
    body = CompletionRequest.model_validate({"prompt": "x", "max_tokens": 4, **{f.key: v for f, v in values.items()}})
    got = params.generation_request(vocab, body, ServerOptions(), 16)
    want = from_keywords(vocab, {"max_tokens": 4, **{f.name: v for f, v in values.items()}})
    assert isinstance(got, GenerationRequest)
    assert got.sampling == want.sampling and got.max_tokens == 4
    chat = ChatRequest.model_validate(
        {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 3, "temperature": 0.1}
    )
    typed, options = params.chat_request(vocab, chat, ServerOptions(), model="m")
    assert (typed.logprobs, typed.model, typed.sampling.temperature, typed.max_tokens) == (3, "m", 0.1, None)
    assert "temperature" not in options and "logprobs" not in options  # chat options only
