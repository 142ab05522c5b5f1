"""How the benchmark starts the servers it times, and how long its long prompt is."""

from __future__ import annotations

import sys
import time

import pytest

from bench import concurrent, long_prompt, stream_latency
from llama_ffi.rpc import free_port


def test_a_server_that_exits_at_start_is_reported_at_once_with_its_output():
    # A server refusing its flags exits within a second; waiting out the start timeout (minutes
    # for a model's load) hid the reason and stalled the run.
    argv = [sys.executable, "-c", "import sys; print('error: n_ctx must be >= 0, got -160'); sys.exit(3)"]
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)exit status 3.*n_ctx must be >= 0, got -160"):
        concurrent.start_server(argv, free_port(), 120)
    assert time.monotonic() - t0 < 30


def test_the_long_prompt_is_12k_where_the_model_holds_it_else_the_most_that_fits():
    assert long_prompt.prompt_length(32768) == 12288  # Gemma 3
    assert long_prompt.prompt_length(8192) == 7680  # SmolLM2: 8 k, with the extension and decoded tokens
    for n_ctx_train in (2048, 8192, 9000, 16384):
        n = long_prompt.prompt_length(n_ctx_train)
        assert n % 256 == 0
        assert n + long_prompt.N_EXTEND + long_prompt.N_DECODE <= n_ctx_train


def test_the_stream_table_times_every_token_of_a_stream(smollm2_path):
    from llama_ffi.high import Llama

    with Llama(smollm2_path, vocab_only=True, progress=False) as vocab:
        prompt = vocab.tokenize(b"Once upon a time, in a small village by the sea,")
    server = concurrent.HttpServer([sys.executable, "-m", "llama_ffi.server"], smollm2_path, 2, 1)
    try:
        arrived = server.stream(prompt, 24)
    finally:
        server.close()
    assert len(arrived) == 24 and arrived == sorted(arrived)
    (row,) = stream_latency.bench(smollm2_path, 2, 1, None)
    assert row["server"] == "llama-ffi serve" and 0 < row["p50_ms"] <= row["p99_ms"] <= row["longest_ms"]
    assert "llama-ffi serve" in stream_latency.stream_latency_table([row])
