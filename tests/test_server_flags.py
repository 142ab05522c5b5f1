"""``llama-ffi serve`` takes llama-server's flags with their meaning: sampling flags are the defaults
of requests that do not set a value, ``-n`` their length; a request's out-of-range sampling value is
clamped where llama-server clamps it."""

from __future__ import annotations

import httpx
import pytest
from server_process import ServerProcess

from llama_ffi import testing
from llama_ffi.high import Llama

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def server(smollm2_path):
    flags = ("-c", "1024", "-np", "2", "--temp", "0", "-n", "7", "--seed", "42", "--top-k", "1")
    with ServerProcess(smollm2_path, *flags) as s:
        yield s


def test_sampling_flags_are_the_requests_defaults(server, smollm2_path):
    # no temperature (OpenAI's default would sample) and no max_tokens in the request
    got = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT}, timeout=60).json()
    assert got["usage"]["completion_tokens"] == 7
    with Llama(smollm2_path, n_ctx=512, progress=False) as llm:  # one slot's cells; greedy
        testing.assert_same_or_near_tie(llm, PROMPT, got["choices"][0]["text"], 7)
    longer = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 9}, timeout=60)
    assert longer.json()["usage"]["completion_tokens"] == 9  # the request's own value wins


def test_out_of_range_values_are_clamped_as_llama_server_does(server):
    for body in ({"top_p": 7}, {"min_p": -1}, {"mirostat": 5, "temperature": 0.5}, {"xtc_probability": 2}):
        r = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, **body}, timeout=60)
        assert r.status_code == 200, (body, r.text)
    refused = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "min_keep": -3}, timeout=60)
    assert refused.status_code == 400 and "min_keep" in refused.text


@pytest.fixture(scope="module")
def keyed(smollm2_path):
    flags = ("-c", "512", "-np", "1", "--api-key", "k", "--api-prefix", "/api", "--alias", "b,a", "--tags", "x,y")
    with ServerProcess(smollm2_path, *flags, env={"LLAMA_ARG_CTX_SIZE": "64"}) as s:  # the flag wins
        yield s


def test_preflight_needs_no_key_and_the_prefix_serves_the_routes(keyed):
    preflight = httpx.options(keyed.url + "/api/v1/chat/completions", headers={"Origin": "http://app.example"})
    assert preflight.status_code == 200
    assert preflight.headers["Access-Control-Allow-Origin"] == "http://app.example"
    auth = {"Authorization": "Bearer k"}
    models = httpx.get(keyed.url + "/api/v1/models", headers=auth).json()["data"][0]
    assert models["id"] == "a" and models["aliases"] == ["a", "b"] and models["tags"] == ["x", "y"]
    props = httpx.get(keyed.url + "/api/props", headers=auth).json()
    assert props["default_generation_settings"]["n_ctx"] == 512 and props["total_slots"] == 1
    assert httpx.get(keyed.url + "/api/metrics", headers=auth).status_code == 501  # off unless --metrics


def test_native_completion_shape(keyed, smollm2_path):
    body = {"prompt": ["The sky is", [1, 2]], "n_predict": 4, "temperature": 0, "n_probs": 2, "return_tokens": True}
    got = httpx.post(keyed.url + "/api/completion", json=body, headers={"Authorization": "Bearer k"}, timeout=60)
    first, second = got.json()
    assert first["stop"] is True and first["stop_type"] in ("limit", "eos") and first["tokens_predicted"] <= 4
    assert len(first["tokens"]) == first["tokens_predicted"] == len(first["completion_probabilities"])
    top = first["completion_probabilities"][0]["top_logprobs"]
    assert len(top) == 2 and top[0]["logprob"] >= top[1]["logprob"] and isinstance(top[0]["id"], int)
    with Llama(smollm2_path, n_ctx=512, progress=False) as llm:
        testing.assert_same_or_near_tie(llm, "The sky is", first["content"], first["tokens_predicted"])
    assert second["tokens_evaluated"] == 2


@pytest.mark.parametrize(
    "flag",
    [["--grp-attn-n", "2"], ["--context-shift"], ["--spec-synth-len", "4"], ["--slot-save-path", "/no/such/dir"]],
)
def test_a_flag_that_cannot_be_honoured_is_named_at_start(smollm2_path, flag):
    s = ServerProcess(smollm2_path, *flag)
    with pytest.raises(RuntimeError, match=flag[0]):
        s.start()


def test_flash_attention_is_off_by_default_for_long_contexts_on_a_cpu():
    from llama_ffi import backends
    from llama_ffi.cli import build_parser
    from llama_ffi.server.launch import llama_options

    def flash_attn(*flags: str):
        return llama_options(build_parser().parse_args(["serve", "-m", "model.gguf", *flags])).get("flash_attn")

    long = ("-c", "32768")
    assert flash_attn(*long) is (None if backends.has_gpu() else False)
    assert flash_attn("-c", "0") is flash_attn(*long)  # the model's own context
    assert flash_attn(*long, "-ngl", "0") is False  # computed on the CPU even beside a GPU
    assert flash_attn() is flash_attn(*long) and flash_attn("-c", "4096") is flash_attn(*long)  # serve's default
    assert flash_attn("-c", "2048") is None  # short: llama.cpp's auto
    assert flash_attn(*long, "-ctv", "q8_0") is None  # a quantized V cache requires it: auto turns it on
    assert flash_attn(*long, "--embeddings") is None  # no decoding at depth
    assert (flash_attn(*long, "-fa", "auto"), flash_attn("-fa", "on"), flash_attn(*long, "-fa", "off")) == (
        None,
        True,
        False,
    )
