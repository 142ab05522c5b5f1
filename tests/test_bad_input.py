"""Bad input gets a clear Python exception and leaves objects usable — never a crash."""

from __future__ import annotations

import pytest

from llama_ffi.high import Llama


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=256, progress=False) as model:
        yield model


def test_missing_model_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        Llama(tmp_path / "nope.gguf")


def test_file_that_is_not_gguf(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ValueError, match="not a GGUF file"):
        Llama(path)


def test_truncated_gguf_gives_llama_cpps_reason(smollm2_path, tmp_path):
    path = tmp_path / "truncated.gguf"
    with open(smollm2_path, "rb") as src:
        path.write_bytes(src.read(2_000_000))
    with pytest.raises(ValueError, match="could not load") as err:
        Llama(path)
    assert len(str(err.value)) > len(f"llama.cpp could not load {path}: ") + 10  # a reason, not nothing


@pytest.mark.parametrize(
    "bad, error, message",
    [
        (dict(n_ctx=-1), ValueError, r"n_ctx must be >= 0, got -1"),
        (dict(n_batch=0), ValueError, r"n_batch must be >= 1, got 0"),
        (dict(n_threads="4"), TypeError, r"n_threads must be an int, got str"),
        (dict(seed=-5), ValueError, r"seed must be an int in 0\.\.0xFFFFFFFF \(or -1: random\), got -5"),
        (dict(type_k="q9_9"), ValueError, r"type_k: unknown ggml type 'q9_9'"),
        (dict(flash_attn="yes"), TypeError, r"flash_attn must be a bool, got str"),
        (dict(n_seq_max=10_000), ValueError, r"n_seq_max must be <= 256, got 10000"),
        (dict(n_batch=64, n_ubatch=128), ValueError, r"n_ubatch \(128\) must not exceed n_batch \(64\)"),
        (dict(n_batch=16, n_seq_max=32), ValueError, r"n_seq_max \(32\) must not exceed n_batch \(16\)"),
        (dict(kv_overrides={"k": object()}), TypeError, r"kv_overrides\['k'\] must be bool, int, float or str"),
        (dict(moe_cache_size=-1), ValueError, r"moe_cache_size must be >= 0, got -1"),
        (dict(moe_cache_size=1.5), TypeError, r"moe_cache_size must be an int, got float"),
    ],
)
def test_bad_constructor_parameters_are_refused_before_loading(smollm2_path, bad, error, message):
    with pytest.raises(error, match=message):
        Llama(smollm2_path, **bad)


def test_moe_cache_size_reaches_llama_cpp(smollm2_path):
    """b11549's expert cache (llama.cpp's --moe-cache-mib, in bytes): llama.cpp's default (0, off)
    unless given. It reaches llama.cpp, which without a GPU backend refuses it with its reason."""
    from llama_ffi import lib
    from llama_ffi.high.context import ContextParams

    assert ContextParams().to_c().moe_cache_size == lib.llama_context_default_params().moe_cache_size == 0
    assert ContextParams(moe_cache_size=64 << 20).to_c().moe_cache_size == 64 << 20
    gpus = [
        i
        for i in range(lib.ggml_backend_dev_count())
        if lib.ggml_backend_dev_type(lib.ggml_backend_dev_get(i)) == lib.GGML_BACKEND_DEVICE_TYPE_GPU
    ]
    if not gpus:
        with pytest.raises(ValueError, match="MoE cache requires a GPU backend"):
            Llama(smollm2_path, moe_cache_size=64 << 20, n_ctx=256, progress=False)
        return
    with Llama(smollm2_path, moe_cache_size=64 << 20, n_ctx=256, n_gpu_layers=-1, progress=False) as llm:
        assert llm.context_params.moe_cache_size == 64 << 20
        assert llm("Hello", max_tokens=2, temperature=0)["usage"]["completion_tokens"] == 2


def test_prompt_longer_than_context_names_both_lengths(llm):
    prompt = "word " * 400
    n = len(llm.tokenize(prompt, special=True))
    with pytest.raises(ValueError, match=rf"{n} tokens .* {llm.n_ctx}"):
        llm(prompt, max_tokens=4)
    assert llm("Hello", max_tokens=2, temperature=0.0)["choices"][0]["text"]


def test_tokens_outside_the_vocabulary(llm):
    n = llm.n_vocab
    for tokens, error, message in (
        ([1, n], ValueError, rf"token 1 \({n}\) is outside the vocabulary \(0\.\.{n - 1}\)"),
        ([-1], ValueError, r"token 0 \(-1\) is outside the vocabulary"),
        ([1, 2.5], TypeError, r"token"),
    ):
        with pytest.raises(error, match=message):
            llm(tokens, max_tokens=2)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.detokenize([llm.n_vocab + 5])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.eval([llm.n_vocab])


def test_bad_types(llm):
    with pytest.raises(TypeError, match="str or bytes"):
        llm.tokenize(123)
    with pytest.raises(TypeError, match="max_tokens must be an int, got str"):
        llm("x", max_tokens="10")
    with pytest.raises(TypeError, match="stop must be str or a list of str, got int"):
        llm("x", stop=[1])
    with pytest.raises(TypeError, match="grammar must be a LlamaGrammar"):
        llm("x", grammar='root ::= "a"')
    with pytest.raises(ValueError, match=r"logprobs must be >= 0, got -1"):
        llm("x", logprobs=-1)


def test_vocab_only_model_tokenizes_but_does_not_generate(smollm2_path):
    with Llama(smollm2_path, vocab_only=True, progress=False) as m:
        assert m.tokenize("Hello world", add_bos=False) == m.tokenize(b"Hello world", add_bos=False)
        assert m.detokenize(m.tokenize("Hello world", add_bos=False)) == b"Hello world"
        with pytest.raises(RuntimeError, match="vocab_only"):
            m("Hello", max_tokens=2)


def test_properties_and_metadata(llm):
    assert llm.n_ctx >= 256 and llm.n_vocab == 49152 and llm.n_embd == 576
    assert llm.n_ctx_train == 8192
    assert llm.token_eos() >= 0 and llm.token_bos() >= 0
    meta = llm.metadata
    assert meta["general.architecture"] == "llama"
    assert (
        "{% for message in messages %}" in meta["tokenizer.chat_template"]
        or "im_start" in meta["tokenizer.chat_template"]
    )


def test_kv_overrides_reach_the_model(smollm2_path):
    with Llama(smollm2_path, n_ctx=64, kv_overrides={"llama.context_length": 1024}, progress=False) as m:
        assert m.n_ctx_train == 1024


@pytest.mark.parametrize("use_mmap, use_mlock", [(True, False), (False, False), (None, True)])
def test_mmap_and_mlock_flags_load(smollm2_path, use_mmap, use_mlock):
    """use_mmap / use_mlock became one llama_load_mode at this pin: every combination loads."""
    from llama_ffi import ffi, lib

    with Llama(smollm2_path, n_ctx=64, use_mmap=use_mmap, use_mlock=use_mlock, progress=False) as m:
        mode = ffi.string(lib.llama_load_mode_name(m.model_params.load_mode)).decode()
        assert ("mmap" in mode) == (use_mmap is not False), mode
        assert m("Hello", max_tokens=2, temperature=0.0)["usage"]["completion_tokens"] == 2
