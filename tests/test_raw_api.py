"""The generated bindings against the real compiled library and real models, raw calls only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from raw import decode_all_logits, greedy_continue, piece, raw_context, raw_model, tokenize

from llama_ffi import ffi, lib

VOCAB_SEP = "\n__ggml_vocab_test__\n"
EXACT = dict(
    n_ctx=64,
    n_batch=64,
    type_k=lib.GGML_TYPE_F32,
    type_v=lib.GGML_TYPE_F32,
    flash_attn_type=lib.LLAMA_FLASH_ATTN_TYPE_DISABLED,
)


def vocab_cases(tree) -> list[tuple[Path, str, list[int]]]:
    cases = []
    for inp in sorted((tree.path / "models").glob("ggml-vocab-*.gguf.inp")):
        raw = inp.read_text(encoding="utf-8")
        texts = raw.split(VOCAB_SEP)
        if texts and texts[-1] == "":
            texts.pop()
        outs = inp.with_suffix(".out").read_text(encoding="utf-8").splitlines()
        assert len(texts) == len(outs), inp
        for text, out in zip(texts, outs):
            cases.append((inp.with_suffix(""), text, [int(t) for t in out.split()]))
    return cases


def test_every_vocab_pair_tokenises_exactly(tree):
    cases = vocab_cases(tree)
    files = sorted({c[0] for c in cases})
    assert len(files) >= 15 and len(cases) > 500
    failures = []
    for gguf in files:
        with raw_model(gguf, vocab_only=True) as model:
            vocab = lib.llama_model_get_vocab(model)
            for _, text, expected in (c for c in cases if c[0] == gguf):
                got = tokenize(vocab, text, add_special=False)
                if got != expected:
                    failures.append((gguf.name, text, expected, got))
    assert not failures, failures[:5]


def test_tiny_model_logits_match_numpy_oracle(tiny_model_path, tiny_config):
    from tiny_llama import forward, weights

    prompt = [1, 300, 301, 5, 250, 17, 300, 302, 303, 42]
    # f32 KV cache and no flash attention (which rounds to f16 on CPU even with an f32 cache),
    # so only float summation order differs: measured max |diff| 3e-6 on logits up to ~10.
    with raw_model(tiny_model_path) as model, raw_context(model, **EXACT) as ctx:
        got = decode_all_logits(ctx, prompt, tiny_config.n_vocab)
    want = forward(tiny_config, weights(tiny_config), prompt)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    assert np.abs(want).max() > 1.0  # the oracle is not trivially zero


def test_tiny_model_default_context_matches_oracle_with_f16_cache(tiny_model_path, tiny_config):
    from tiny_llama import forward, weights

    prompt = [1, 310, 4, 99, 300, 301]
    with raw_model(tiny_model_path) as model, raw_context(model, n_ctx=64) as ctx:
        got = decode_all_logits(ctx, prompt, tiny_config.n_vocab)
    want = forward(tiny_config, weights(tiny_config), prompt, kv_dtype=np.float16)
    # llama.cpp's defaults: f16 K/V cache (rounded in the oracle too) and flash attention "auto",
    # which on CPU computes in f16: measured max |diff| 6e-3, tolerance 3e-2.
    np.testing.assert_allclose(got, want, atol=3e-2, rtol=0)


def test_tiny_model_greedy_tokens_match_oracle_exactly(tiny_model_path, tiny_config):
    from tiny_llama import greedy, weights

    prompt = [1, 300, 301, 302]
    want = greedy(tiny_config, weights(tiny_config), prompt, 12)
    with raw_model(tiny_model_path) as model, raw_context(model, **EXACT) as ctx:
        vocab = lib.llama_model_get_vocab(model)
        got = greedy_continue(ctx, vocab, prompt, 12)
    assert got == want


def test_smollm2_greedy_capital_of_france(smollm2_path):
    with raw_model(smollm2_path) as model, raw_context(model, n_ctx=256) as ctx:
        vocab = lib.llama_model_get_vocab(model)
        prompt = tokenize(vocab, "The capital of France is", add_special=True)
        assert prompt[0] == lib.llama_vocab_bos(vocab) or not lib.llama_vocab_get_add_bos(vocab)
        out = greedy_continue(ctx, vocab, prompt, 8)
        text = b"".join(piece(vocab, t) for t in out).decode()
    assert "Paris" in text, text


def test_struct_layouts_are_the_compilers():
    # API mode: cffi computed these from the real headers at compile time.
    assert ffi.sizeof("struct llama_context_params") > 64
    assert ffi.offsetof("struct llama_batch", "token") == 8
    cp = lib.llama_context_default_params()
    assert cp.n_ctx == 512 and cp.n_batch == 2048
    assert lib.LLAMA_DEFAULT_SEED == 0xFFFFFFFF
    assert lib.LLAMA_TOKEN_NULL == -1
    assert lib.LLAMA_SESSION_MAGIC == lib.LLAMA_FILE_MAGIC_GGSN
    assert ffi.string(lib.GGUF_MAGIC) == b"GGUF"


def test_undefined_function_is_not_bound():
    assert not hasattr(lib, "ggml_threadpool_get_n_threads")
    assert hasattr(lib, "ggml_threadpool_new")


def test_mtmd_bindings_tokenize_and_evaluate_an_image(smollm2_path, tree, tmp_path):
    """mtmd through the raw bindings: a synthetic projector for SmolLM2, llama.cpp's test image,
    one prompt with the default marker: text, image, text chunks, evaluated into the context."""
    import tiny_mmproj

    mmproj = tiny_mmproj.write_mmproj(tmp_path / "mmproj.gguf", n_embd_text=576)
    with raw_model(smollm2_path) as model, raw_context(model, n_ctx=512) as ctx:
        _mtmd_image_round_trip(mmproj, model, ctx, tree)


def _mtmd_image_round_trip(mmproj, model, ctx, tree) -> None:
    params = lib.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.print_timings = False, 2, False
    mctx = lib.mtmd_init_from_file(str(mmproj).encode(), model, params)
    assert mctx != ffi.NULL and lib.mtmd_support_vision(mctx) and not lib.mtmd_support_audio(mctx)
    image = str(tree.path / "tools" / "mtmd" / "test-1.jpeg").encode()
    wrapped = lib.mtmd_helper_bitmap_init_from_file(mctx, image, False, lib.mtmd_helper_init_opt_default())
    assert wrapped.bitmap != ffi.NULL
    assert (lib.mtmd_bitmap_get_nx(wrapped.bitmap), lib.mtmd_bitmap_get_ny(wrapped.bitmap)) == (640, 488)
    prompt = b"<|im_start|>user\n" + ffi.string(lib.mtmd_default_marker()) + b"Describe.<|im_end|>\n"
    text_buf = ffi.new("char[]", prompt)
    text = ffi.new(
        "mtmd_input_text *", {"text": text_buf, "text_len": len(prompt), "add_special": True, "parse_special": True}
    )
    chunks = lib.mtmd_input_chunks_init()
    bitmaps = ffi.new("mtmd_bitmap *[1]", [wrapped.bitmap])
    try:
        assert lib.mtmd_tokenize(mctx, chunks, text, bitmaps, 1) == 0
        kinds = [
            lib.mtmd_input_chunk_get_type(lib.mtmd_input_chunks_get(chunks, i))
            for i in range(lib.mtmd_input_chunks_size(chunks))
        ]
        assert kinds == [
            lib.MTMD_INPUT_CHUNK_TYPE_TEXT,
            lib.MTMD_INPUT_CHUNK_TYPE_IMAGE,
            lib.MTMD_INPUT_CHUNK_TYPE_TEXT,
        ]
        image_chunk = lib.mtmd_input_chunks_get(chunks, 1)
        assert lib.mtmd_input_chunk_get_n_tokens(image_chunk) == (32 // 8) ** 2  # one per patch
        n_past = ffi.new("llama_pos *")
        assert lib.mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 512, True, n_past) == 0
        assert (
            n_past[0]
            == lib.mtmd_helper_get_n_pos(chunks)
            == lib.llama_memory_seq_pos_max(lib.llama_get_memory(ctx), 0) + 1
        )
        # one marker too few for the bitmaps: an error code, not a crash (mtmd.h documents 1; this
        # pin throws inside and returns 2 from its catch-all)
        spare = lib.mtmd_input_chunks_init()
        two = ffi.new("mtmd_bitmap *[2]", [wrapped.bitmap, wrapped.bitmap])
        assert lib.mtmd_tokenize(mctx, spare, text, two, 2) != 0
        lib.mtmd_input_chunks_free(spare)
    finally:
        lib.mtmd_input_chunks_free(chunks)
        lib.mtmd_bitmap_free(wrapped.bitmap)
        lib.mtmd_free(mctx)
