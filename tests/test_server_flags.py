"""``llama-ffi serve`` takes llama-server's flags with their meaning: sampling flags are the defaults
of requests that do not set a value, ``-n`` their length; a request's out-of-range sampling value is
clamped where llama-server clamps it."""

from __future__ import annotations

import httpx
import pytest
from server_process import ServerProcess

from llama_ffi.high import Llama

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def server(smollm2_path):
    flags = ("-c", "1024", "-np", "2", "--temp", "0", "-n", "7", "--seed", "42", "--top-k", "1")
    with ServerProcess(smollm2_path, *flags) as s:
        yield s


def test_sampling_flags_are_the_requests_defaults(server, smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_seq_max=2, kv_unified=True, progress=False) as llm:
        want = llm.create_completion(PROMPT, max_tokens=7, temperature=0)["choices"][0]["text"]
    # no temperature (OpenAI's default would sample) and no max_tokens in the request
    got = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT}, timeout=60).json()
    assert got["usage"]["completion_tokens"] == 7
    assert got["choices"][0]["text"] == want
    longer = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 9}, timeout=60)
    assert longer.json()["usage"]["completion_tokens"] == 9  # the request's own value wins


def test_out_of_range_values_are_clamped_as_llama_server_does(server):
    for body in ({"top_p": 7}, {"min_p": -1}, {"mirostat": 5, "temperature": 0.5}, {"xtc_probability": 2}):
        r = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, **body}, timeout=60)
        assert r.status_code == 200, (body, r.text)
    refused = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "min_keep": -3}, timeout=60)
    assert refused.status_code == 400 and "min_keep" in refused.text
