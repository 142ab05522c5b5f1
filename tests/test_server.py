"""``llama-ffi serve`` against the official ``openai`` client and plain HTTP: a real server
process, the real engine, answers compared with the same requests on an in-process ``Llama``."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import re
import threading
import time

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_process import ServerProcess
from stream_timing import arrivals, assert_token_by_token

from llama_ffi import lib, testing

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

N_CTX, SLOTS = 2048, 4
PROMPT = "The three primary colours are"
MESSAGES = [{"role": "user", "content": "Name three fruits."}]


@pytest.fixture(scope="module")
def server(smollm2_path):
    with ServerProcess(smollm2_path, "-c", str(N_CTX), "-np", str(SLOTS), "--metrics") as s:
        yield s


@pytest.fixture(scope="module")
def reference(smollm2_path):
    """The same model and context shape, in this process."""
    from llama_ffi.high import Llama

    with Llama(smollm2_path, n_ctx=N_CTX, n_seq_max=SLOTS, kv_unified=True, n_threads=2, progress=False) as llm:
        yield llm


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def single(smollm2_path):
    """A one-slot server, for comparisons that must be exact on any CPU: see ``afresh``."""
    with ServerProcess(smollm2_path, "-c", str(N_CTX), "-np", "1", "--metrics") as s:
        s.client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        yield s


def afresh(single) -> None:
    """Make the only slot forget the next request's prompt: a prompt with another first token cuts
    its cache to nothing, so the next request is evaluated whole, from the same cells, in the same
    batch shapes as the first time (a prefix reused from the cache would decode the last prompt
    token alone, which some CPUs compute a little differently)."""
    httpx.post(single.url + "/v1/completions", json={"prompt": "Zebra", "max_tokens": 1}, timeout=60)


def slots(server) -> list[dict]:
    return httpx.get(server.url + "/slots").json()


def metric(server, name: str) -> float:
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith(f"llamacpp:{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def wait_idle(server, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while any(s["is_processing"] for s in slots(server)):
        assert time.monotonic() < deadline, f"slots still busy: {slots(server)}"
        time.sleep(0.05)


# ---- completions ---------------------------------------------------------------------------------
def test_greedy_completion_equals_the_in_process_llama(client, reference):
    out = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt=PROMPT, max_tokens=24, temperature=0
    )
    assert out.object == "text_completion" and out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 24 and out.usage.prompt_tokens == len(reference.tokenize(PROMPT))
    testing.assert_same_or_near_tie(reference, PROMPT, out.choices[0].text, 24)


def test_streamed_completion_equals_the_whole_one(single):
    client = single.client
    afresh(single)
    whole = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", prompt="Once upon a time", max_tokens=20, temperature=0
    )
    afresh(single)
    chunks = list(
        client.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1",
            prompt="Once upon a time",
            max_tokens=20,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and not any(finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20


def test_a_stream_without_include_usage_has_no_usage(server):
    with httpx.stream(
        "POST", server.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 4, "stream": True}
    ) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all("usage" not in json.loads(line[6:]) for line in lines[:-1])


def test_a_greedy_sse_stream_sends_each_token_as_it_is_decoded(server):
    body = {"prompt": PROMPT, "max_tokens": 48, "stream": True, "ignore_eos": True, "temperature": 0}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
        events = (line for line in r.iter_lines() if line.startswith("data: {"))
        assert_token_by_token(arrivals(events))


def test_token_prompts_and_lists_of_prompts(client, single, reference):
    tokens = reference.tokenize(PROMPT)
    afresh(single)
    by_text = single.client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt=PROMPT, max_tokens=8, temperature=0
    )
    afresh(single)
    by_tokens = single.client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt=tokens, max_tokens=8, temperature=0
    )
    assert by_tokens.choices[0].text == by_text.choices[0].text
    many = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt=[PROMPT, "Two plus two is"], max_tokens=8, temperature=0
    )
    assert [c.index for c in many.choices] == [0, 1]
    testing.assert_same_or_near_tie(
        reference, "Two plus two is", many.choices[1].text, 8, limit=testing.parallel_bound(reference)
    )


def test_n_logprobs_seed_and_stop(client, single):
    out = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        prompt="My favourite animal is",
        max_tokens=12,
        temperature=1.0,
        n=3,
        seed=7,
        logprobs=2,
    )
    assert sorted(c.index for c in out.choices) == [0, 1, 2]
    for c in out.choices:
        assert len(c.logprobs.tokens) == len(c.logprobs.token_logprobs) == len(c.logprobs.top_logprobs)
        assert all(len(top) == 2 and lp <= 0 for top, lp in zip(c.logprobs.top_logprobs, c.logprobs.token_logprobs))
    seeded = []
    for seed in (7, 7, 8):
        afresh(single)
        seeded.append(
            single.client.completions.create(
                model="SmolLM2-135M-Instruct.Q4_1.gguf",
                prompt="My favourite animal is",
                max_tokens=24,
                temperature=1.0,
                seed=seed,
            )
            .choices[0]
            .text
        )
    assert seeded[0] == seeded[1] != seeded[2]  # the seed reaches the sampler: reproducible, and it matters
    stopped = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt="1, 2, 3, 4,", max_tokens=20, temperature=0, stop=["7"]
    )
    assert "7" not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop"


def test_logit_bias_and_llama_server_extras(client, reference):
    plain = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt=PROMPT, max_tokens=1, temperature=0
    )
    first = reference.tokenize(plain.choices[0].text, add_bos=False)[0]
    banned = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        prompt=PROMPT,
        max_tokens=1,
        temperature=0,
        logit_bias={str(first): -100},
    )
    assert banned.choices[0].text != plain.choices[0].text
    extras = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        prompt=PROMPT,
        max_tokens=6,
        extra_body={"top_k": 1, "min_p": 0.1, "repeat_penalty": 1.1, "grammar": 'root ::= "yes" | "no"'},
    )
    assert extras.choices[0].text in ("yes", "no")
    full = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        prompt="Hi",
        max_tokens=30,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert full.usage.completion_tokens == 30


# ---- chat ------------------------------------------------------------------------------------------------
def test_chat_equals_the_in_process_llama_and_streams_the_same_text(single, reference):
    client = single.client
    afresh(single)
    out = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf", messages=MESSAGES, max_tokens=24, temperature=0
    )
    want = reference.create_chat_completion(MESSAGES, max_tokens=24, temperature=0)
    assert out.choices[0].message.role == "assistant"
    if out.choices[0].message.content != want["choices"][0]["message"]["content"]:
        prompt = reference.tokenize(_rendered(reference), special=True)
        testing.assert_same_or_near_tie(reference, prompt, out.choices[0].message.content, 24)
    afresh(single)
    chunks = list(
        client.chat.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1.gguf", messages=MESSAGES, max_tokens=24, temperature=0, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant" and len({c.id for c in chunks}) == 1
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == out.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks]
    assert finishes[-1] == out.choices[0].finish_reason and not any(finishes[:-1])
    assert out.usage.prompt_tokens == want["usage"]["prompt_tokens"]


def _rendered(llm) -> str:
    from llama_ffi.high.chat.completion import render_prompt

    return render_prompt(llm, MESSAGES)


def test_chat_n_logprobs_and_cached_tokens(client):
    out = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        messages=MESSAGES,
        max_tokens=8,
        temperature=0.9,
        n=2,
        seed=1,
        logprobs=True,
        top_logprobs=3,
    )
    assert sorted(c.index for c in out.choices) == [0, 1]
    for c in out.choices:
        assert c.logprobs.content and all(len(t.top_logprobs) == 3 for t in c.logprobs.content)
    again = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf", messages=MESSAGES, max_tokens=8, temperature=0
    )
    # the slot kept this conversation's prompt: all of it but its last token comes from the cache
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1


def test_json_mode_and_schema(client):
    out = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        messages=[{"role": "user", "content": "Give a JSON person."}],
        max_tokens=64,
        temperature=0,
        response_format={"type": "json_object"},
    )
    if out.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(out.choices[0].message.content), dict)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    out = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        messages=[{"role": "user", "content": "Name a city."}],
        max_tokens=48,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
    )
    assert out.choices[0].finish_reason == "stop"
    assert set(json.loads(out.choices[0].message.content)) == {"city"}


def test_every_api_s_constraint_fields_are_enforced(server):
    """vLLM's structured_outputs and guided_* fields and llama-server's %llguidance grammar, on the
    completion and chat routes: what comes back is what the constraint allows; two constraints, or
    one that cannot be enforced, are a 400 naming them."""

    def complete(route: str, max_tokens: int = 24, **fields) -> httpx.Response:
        body = {"prompt": "Answer:"} if route == "/v1/completions" else {"messages": MESSAGES}
        body = {**body, "max_tokens": max_tokens, "temperature": 1.0, **fields}
        return httpx.post(server.url + route, json=body, timeout=60)

    def text(response: httpx.Response) -> str:
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        return choice["text"] if "text" in choice else choice["message"]["content"]

    lark = '%llguidance {}\nstart: "id-" /[0-9]{3}/\n'
    for route in ("/v1/completions", "/v1/chat/completions"):
        for seed in (1, 2):
            assert re.fullmatch(r"[a-f]{4}", text(complete(route, seed=seed, guided_regex="[a-f]{4}")))
            assert text(complete(route, seed=seed, structured_outputs={"choice": ["red", "blue"]})) in ("red", "blue")
            assert text(complete(route, seed=seed, guided_choice=["up", "down"])) in ("up", "down")
            schema = {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 5}},
                "required": ["n"],
                "additionalProperties": False,
            }
            # room for whitespace between JSON tokens (at most 2 newlines and 20 spaces each)
            value = json.loads(text(complete(route, 64, seed=seed, structured_outputs={"json": schema})))
            assert set(value) == {"n"} and 1 <= value["n"] <= 5
            assert re.fullmatch(r"id-[0-9]{3}", text(complete(route, seed=seed, grammar=lark)))
        both = complete(route, guided_regex="a+", guided_choice=["a"])
        assert both.status_code == 400 and "guided_regex" in both.text and "guided_choice" in both.text
        broken = complete(route, guided_regex="(open")
        assert broken.status_code == 400 and "guided_regex" in broken.json()["error"]["message"]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 10}},
                "required": ["city"],
            },
        },
    }
]


def test_tool_calls_whole_and_streamed(single):
    client = single.client
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    afresh(single)
    out = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        messages=ask,
        max_tokens=64,
        temperature=0,
        tools=TOOLS,
        tool_choice="required",
    )
    call = out.choices[0].message.tool_calls[0]
    assert out.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)
    afresh(single)
    chunks = list(
        client.chat.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1.gguf",
            messages=ask,
            max_tokens=64,
            temperature=0,
            tools=TOOLS,
            stream=True,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
    )
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].function.name == "get_weather"
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == json.loads(call.function.arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_async_clients_are_decoded_together(server, reference):
    async def main():
        aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
        prompts = [f"Question {i}: what is {i} plus {i}? Answer:" for i in range(6)]
        outs = await asyncio.gather(
            *(
                aclient.completions.create(
                    model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt=p, max_tokens=16, temperature=0
                )
                for p in prompts
            )
        )
        await aclient.close()
        return prompts, outs

    before = metric(server, "n_busy_slots_per_decode")
    prompts, outs = asyncio.run(main())
    bound = testing.parallel_bound(reference)
    for p, out in zip(prompts, outs):
        assert_greedy_or_near_tie(reference, p, out.choices[0].text, 16, bound)
    assert metric(server, "n_busy_slots_per_decode") > before  # some steps carried several clients


def assert_greedy_or_near_tie(llm, prompt: str, got: str, n: int, bound: float) -> None:
    """``got`` (text decoded beside other clients) equals plain greedy decoding, or at the first
    token where it leaves it, took a token whose logit was within ``bound`` of the greedy one's
    (the plain run's logits; with several clients in the steps the third-best can win a near tie
    as well as the runner-up)."""
    tokens = llm.tokenize(prompt)
    want = [s[0] for s in testing.greedy_trace(llm, tokens, n)]
    pieces = [llm.tokenizer.piece(t) for t in want]
    got_bytes, done, i = got.encode(), b"", 0
    while i < len(pieces) and got_bytes.startswith(done + pieces[i]):
        done, i = done + pieces[i], i + 1
    if i == len(pieces) and done == got_bytes:
        return
    assert i < len(pieces), f"longer than greedy: {got!r}"
    rest = got_bytes[len(done) :]
    llm.reset()
    llm.eval_prompt(tokens + want[:i])
    logits = llm.logits().copy()
    llm.reset()
    taken = [t for t in range(llm.n_vocab) if (p := llm.tokenizer.piece(t)) and rest.startswith(p)]
    best = max(float(logits[t]) for t in taken) if taken else -np.inf
    assert logits[want[i]] - best < bound, (
        f"diverged at token {i} to a token {logits[want[i]] - best:.3f} "
        f"logits below greedy's (bound {bound:.3f}): {got!r}"
    )


# ---- other endpoints ------------------------------------------------------------------------------
def test_models_tokenize_detokenize_infill(server, reference):
    models = httpx.get(server.url + "/v1/models").json()
    assert models["data"][0]["id"] == models["models"][0]["name"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert models["models"][0]["capabilities"] == ["completion"]  # llama-server's Ollama-style list
    meta = models["data"][0]["meta"]
    assert meta["n_params"] == lib.llama_model_n_params(reference.loaded_model.ptr) and 100e6 < meta["n_params"] < 200e6
    assert meta["size"] == lib.llama_model_size(reference.loaded_model.ptr)
    text = "Hello <|im_start|> world, ünïcode"
    tokens = httpx.post(server.url + "/tokenize", json={"content": text}).json()["tokens"]
    assert tokens == reference.tokenize(text, add_bos=False, special=True)
    assert httpx.post(server.url + "/detokenize", json={"tokens": tokens}).json()["content"] == text
    pieces = httpx.post(server.url + "/tokenize", json={"content": "Hi", "with_pieces": True}).json()["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hi"
    r = httpx.post(server.url + "/detokenize", json={"tokens": [10**7]})
    assert r.status_code == 400 and "error" in r.json()
    r = httpx.post(
        server.url + "/infill",
        json={"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 4, "temperature": 0},
    )
    try:  # whatever the model is: the server answers as the in-process Llama does
        want = reference("def f(", suffix="):\n", max_tokens=4, temperature=0)
    except ValueError as error:
        assert r.status_code == 400 and r.json()["error"]["message"] == str(error)
    else:
        assert r.status_code == 200 and r.json()["tokens_predicted"] == want["usage"]["completion_tokens"]


def test_slots_and_metrics(server, client):
    assert len(slots(server)) == SLOTS
    before = metric(server, "tokens_predicted_total")
    client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        prompt="Count: one, two,",
        max_tokens=5,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert metric(server, "tokens_predicted_total") == before + 5
    assert metric(server, "prompt_tokens_total") > 0 and metric(server, "requests_processing") == 0
    assert any(s["n_cached_tokens"] > 0 for s in slots(server))


def test_timings_split_the_time_at_the_first_token(server):
    """Tokens a greedy run decodes several at a time still count from the first one's time: the
    generation's share is its own, not squashed into an instant at the end."""
    wait_idle(server)
    body = {"prompt": PROMPT, "n_predict": 32, "ignore_eos": True, "temperature": 0, "cache_prompt": False}
    started = time.perf_counter()
    timings = httpx.post(server.url + "/completion", json=body, timeout=60).json()["timings"]
    wall_ms = (time.perf_counter() - started) * 1e3
    assert timings["predicted_n"] == 32
    assert 0.25 * wall_ms < timings["predicted_ms"] < wall_ms, (timings, wall_ms)
    assert timings["prompt_ms"] + timings["predicted_ms"] < 1.05 * wall_ms


def test_metrics_count_llama_servers_own_routes_as_it_does(server):
    wait_idle(server)
    before = {n: metric(server, n) for n in ("tokens_predicted_total", "prompt_tokens_total", "n_decode_total")}
    r = httpx.post(server.url + "/completion", json={"prompt": PROMPT, "n_predict": 4, "ignore_eos": True}, timeout=60)
    timings = r.json()["timings"]
    assert (
        metric(server, "tokens_predicted_total")
        == before["tokens_predicted_total"] + timings["predicted_n"]
        == (before["tokens_predicted_total"] + 4)
    )
    assert metric(server, "prompt_tokens_total") == before["prompt_tokens_total"] + timings["prompt_n"]
    assert metric(server, "n_decode_total") > before["n_decode_total"]
    # the first token comes with the prompt: the speed is over the 3 steps after it
    assert timings["predicted_per_second"] == pytest.approx(3e3 / timings["predicted_ms"])
    # ignore_eos bans every end-of-generation token: -inf, null in JSON (llama-server's shape)
    bans = r.json()["generation_settings"]["logit_bias"]
    assert bans and all(b["bias"] is None and isinstance(b["token"], int) for b in bans)
    response = httpx.get(server.url + "/metrics")
    assert b"Process-Start-Time-Unix" in b"".join(k for k, _ in response.headers.raw)  # as llama-server spells it
    assert 0 < int(response.headers["process-start-time-unix"]) <= time.time()
    for name in ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total"):
        assert metric(server, name) == 0  # no drafter here


def test_metrics_under_vllms_names_for_a_router_of_replicas(server):
    """The gauges the Gateway API Inference Extension reads: requests running and waiting, the share
    of KV cells in use, the adapters loaded."""

    def gauge(name: str) -> tuple[str, float]:
        lines = [ln for ln in httpx.get(server.url + "/metrics").text.splitlines() if ln.startswith(f"vllm:{name}{{")]
        assert len(lines) == 1, name
        labels, value = lines[0].rsplit(" ", 1)
        return labels, float(value)

    wait_idle(server)
    labels, running = gauge("num_requests_running")
    assert running == 0 and labels == 'vllm:num_requests_running{model_name="SmolLM2-135M-Instruct.Q4_1.gguf"}'
    body = {"prompt": PROMPT, "max_tokens": 300, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as stream:
        lines = stream.iter_lines()  # kept: a closed iterator closes the response (the client leaves)
        next(line for line in lines if line.startswith("data: "))
        assert gauge("num_requests_running")[1] == 1 and gauge("num_requests_waiting")[1] == 0
    wait_idle(server)
    cached = sum(s["n_cached_tokens"] for s in slots(server))
    assert cached > 0 and gauge("kv_cache_usage_perc")[1] == pytest.approx(cached / N_CTX)
    labels, stamp = gauge("lora_requests_info")
    assert 'running_lora_adapters=""' in labels and 'max_lora="0"' in labels and 0 < stamp <= time.time()


# ---- errors ---------------------------------------------------------------------------------------------
BAD = [
    ("/v1/completions", b"{not json", "JSON"),
    ("/v1/completions", b"[1, 2]", "object"),
    ("/v1/completions", b"{}", "prompt"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": -5}', "max_tokens"),
    ("/v1/completions", b'{"prompt": "x", "temperature": "hot"}', "temperature"),
    ("/v1/completions", b'{"prompt": "x", "n": 0}', "n"),
    ("/v1/completions", b'{"prompt": "x", "logit_bias": {"99999999": 1}}', "logit_bias"),
    ("/v1/completions", b'{"prompt": "x", "grammar": "root ::= nothing"}', "grammar"),
    ("/v1/completions", b'{"prompt": [1, "a"]}', "prompt"),
    ("/v1/completions", b'{"prompt": "x", "lora": [{"id": 3, "scale": 1}]}', "lora"),
    ("/v1/chat/completions", b'{"messages": "hello"}', "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "x"}]}', "role"),
    (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": [{"type": "image_url", '
        b'"image_url": {"url": "http://example.com/a.png"}}]}]}',
        "URL",
    ),
    (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "/etc/passwd"}}]}]}',
        "local files",
    ),
    (
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}',
        "response_format",
    ),
]


@pytest.mark.parametrize("path,body,named", BAD)
def test_bad_requests_get_openai_shaped_400s(server, path, body, named):
    r = httpx.post(server.url + path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert named.lower() in error["message"].lower(), error


def test_a_prompt_longer_than_the_context_names_both_numbers(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt="word " * 3000, max_tokens=1)
    message = info.value.body["message"]
    # -np 4 without --kv-unified: each slot holds N_CTX / 4 cells, as in llama-server
    assert "3001" in message and str(N_CTX // SLOTS) in message
    assert info.value.body["code"] == "context_length_exceeded"


def test_any_model_name_is_served_and_an_unknown_route_is_404(server, client):
    # llama-server's rule for one model: clients send names such as "gpt-4"; the result names ours
    assert client.completions.create(model="gpt-4", prompt="x", max_tokens=1).model == "SmolLM2-135M-Instruct.Q4_1.gguf"
    r = httpx.get(server.url + "/v2/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.post(server.url + "/v1/embeddings", json={"input": "x"})
    assert r.status_code == 501 and "--embeddings" in r.json()["error"]["message"]


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)


def json_containers(inner):
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)


JSON = st.recursive(SCALARS, json_containers, max_leaves=12)
FIELDS = st.sampled_from(
    [
        "prompt",
        "messages",
        "max_tokens",
        "n",
        "temperature",
        "stop",
        "logit_bias",
        "stream",
        "logprobs",
        "top_logprobs",
        "seed",
        "tools",
        "tool_choice",
        "response_format",
        "lora",
        "n_predict",
        "grammar",
        "input",
        "content",
        "tokens",
        "top_k",
        "echo",
    ]
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(
        [
            "/v1/completions",
            "/v1/chat/completions",
            "/tokenize",
            "/detokenize",
            "/infill",
            "/v1/embeddings",
            "/v1/rerank",
        ]
    ),
    body=st.dictionaries(FIELDS, JSON, max_size=6),
)
def test_no_body_crashes_or_hangs_the_server(server, path, body):
    for name in ("max_tokens", "n_predict"):  # whatever else is drawn, generations stay short
        if isinstance(body.get(name), int) or name not in body:
            body[name] = 2
    if isinstance(body.get("n"), int) and body["n"] > 4:
        body["n"] = 4
    r = httpx.post(server.url + path, json=body, timeout=60)
    assert r.status_code in (200, 400, 404, 501), (r.status_code, r.text)
    if r.status_code != 200:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in r.text


def test_the_server_is_healthy_after_the_fuzzing(server, client):
    assert httpx.get(server.url + "/health").status_code == 200
    wait_idle(server)
    out = client.completions.create(model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt=PROMPT, max_tokens=4, temperature=0)
    assert out.usage.completion_tokens == 4


# ---- clients that leave, a full queue, keys, SIGTERM ----------------------------------------------------------
def test_a_client_that_disconnects_frees_its_slot(server):
    with httpx.stream(
        "POST",
        server.url + "/v1/completions",
        json={"prompt": "Tell a very long story.", "max_tokens": 1500, "stream": True, "ignore_eos": True},
    ) as r:
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
        assert any(s["is_processing"] for s in slots(server))
    wait_idle(server, timeout=10)  # 1500 tokens would take far longer
    body = {"prompt": "Tell another very long story.", "max_tokens": 1500, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json=body, timeout=1.0)
    wait_idle(server, timeout=10)  # a non-streamed request whose client went away is cancelled too


def test_past_the_queue_503_with_retry_after(smollm2_path):
    with ServerProcess(smollm2_path, "-c", "1024", "-np", "1", "--queue-size", "0") as s:
        body = {"prompt": "Tell a long story.", "max_tokens": 400, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", s.url + "/v1/completions", json=body) as r:
            lines = r.iter_lines()  # kept: dropping it would close the stream (a disconnect)
            next(lines)
            busy = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.APIStatusError) as info:
                busy.completions.create(model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt="x", max_tokens=1)
            assert info.value.status_code == 503
            assert info.value.response.headers["Retry-After"] == "1"
        ok = httpx.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=30)
        assert ok.status_code == 200


def test_api_keys(smollm2_path, tmp_path):
    (tmp_path / "keys").write_text("second-key\n")
    with ServerProcess(
        smollm2_path, "-c", "512", "-np", "1", "--api-key", "first-key", "--api-key-file", str(tmp_path / "keys")
    ) as s:
        assert httpx.get(s.url + "/health").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-Api-Key": "wrong"}):
            r = httpx.get(s.url + "/v1/models", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert httpx.get(s.url + "/v1/models", headers={"X-Api-Key": "second-key"}).status_code == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0).models.list()
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="first-key", max_retries=0)
        assert good.completions.create(model="SmolLM2-135M-Instruct.Q4_1.gguf", prompt="Hi", max_tokens=2).usage


def test_sigterm_finishes_the_requests_in_flight_and_exits_0(smollm2_path):
    s = ServerProcess(smollm2_path, "-c", "1024", "-np", "2").start()
    got: dict = {}

    def read():
        with httpx.stream(
            "POST",
            s.url + "/v1/completions",
            timeout=120,
            json={
                "prompt": "Once",
                "max_tokens": 200,
                "stream": True,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            },
        ) as r:
            got["lines"] = [line for line in r.iter_lines() if line]

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 30
    while not any(x["is_processing"] for x in httpx.get(s.url + "/slots").json()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    s.terminate()
    reader.join(120)
    assert s.proc.wait(60) == 0, s.output()
    assert got["lines"][-1] == "data: [DONE]"
    assert json.loads(got["lines"][-2][6:])["usage"]["completion_tokens"] == 200


# ---- embeddings and reranking ------------------------------------------------------------------------------
def test_embeddings_float_and_base64(smollm2_path):
    from llama_ffi import lib
    from llama_ffi.high import Llama

    texts = ["The cat sat on the mat.", "A completely different sentence."]
    with Llama(
        smollm2_path, embeddings=True, pooling_type=lib.LLAMA_POOLING_TYPE_MEAN, n_ctx=512, progress=False
    ) as llm:
        want = np.array(llm.embed(texts, normalize=True))
    with ServerProcess(smollm2_path, "-c", "512", "--embeddings", "--pooling", "mean", "--metrics") as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        by_default = client.embeddings.create(model="SmolLM2-135M-Instruct.Q4_1.gguf", input=texts)  # base64
        as_float = client.embeddings.create(
            model="SmolLM2-135M-Instruct.Q4_1.gguf", input=texts, encoding_format="float"
        )
        raw = httpx.post(s.url + "/v1/embeddings", json={"input": texts, "encoding_format": "base64"}).json()
        decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in raw["data"]]
        np.testing.assert_array_equal(
            np.array(decoded), np.array([d.embedding for d in as_float.data], dtype=np.float32)
        )
        np.testing.assert_allclose([d.embedding for d in by_default.data], want, atol=1e-5)
        assert as_float.usage.prompt_tokens > 0
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "x"})
        assert r.status_code == 501
        # embedding inputs are prompts that cost decodes: llama-server counts them so
        assert metric(s, "prompt_tokens_total") == 3 * as_float.usage.prompt_tokens
        assert metric(s, "n_decode_total") >= 3 and metric(s, "tokens_predicted_total") == 0


def test_rerank(tree):
    import minilm

    path = minilm.rank_gguf_path(tree)
    from llama_ffi import lib
    from llama_ffi.high.llama_embedding import LlamaEmbedding

    query, docs = (
        "What is the capital of France?",
        ["Paris is the capital of France.", "Bananas are yellow.", "France borders Spain."],
    )
    with LlamaEmbedding(path, pooling_type=lib.LLAMA_POOLING_TYPE_RANK) as m:
        want = m.rank(query, docs)
    with ServerProcess(path, "-c", "512", "--reranking") as s:
        out = httpx.post(s.url + "/v1/rerank", json={"query": query, "documents": docs, "top_n": 2}).json()
        assert [r["index"] for r in out["results"]] == list(np.argsort(want)[::-1][:2])
        np.testing.assert_allclose([r["relevance_score"] for r in out["results"]], sorted(want)[::-1][:2], atol=1e-4)


def test_health_is_503_while_the_model_loads(smollm2_path):
    """The app listens before its Llama exists (``llama-ffi serve`` loads in a thread)."""
    from fastapi.testclient import TestClient

    from llama_ffi.high import ClosedError, Llama
    from llama_ffi.server.api import create_app
    from llama_ffi.server.options import ServerOptions

    go = threading.Event()

    def load():
        go.wait(30)
        return Llama(smollm2_path, n_ctx=256, n_seq_max=1, progress=False)

    app = create_app(load, ServerOptions(), owns_llm=True)
    with TestClient(app) as http:
        r = http.get("/health")
        assert r.status_code == 503 and r.json()["error"]["type"] == "unavailable_error"
        assert http.post("/v1/completions", json={"prompt": "x"}).status_code == 503
        go.set()
        deadline = time.monotonic() + 30
        while http.get("/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2}).json()["usage"]["completion_tokens"]
    with pytest.raises(ClosedError):  # the server owned it: closed at shutdown
        app.state.served.llm.tokenize("x")


def test_infill_with_fim_tokens_declared_by_override_kv(smollm2_path):
    """SmolLM2 has no FIM tokens; llama-server's --override-kv declares three (as tests/test_infill.py
    does): /infill then answers as the in-process Llama with the same overrides, the same shapes."""
    from llama_ffi.high import Llama

    fim = {
        "tokenizer.ggml.fim_pre_token_id": 8,
        "tokenizer.ggml.fim_suf_token_id": 9,
        "tokenizer.ggml.fim_mid_token_id": 10,
    }
    prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
    with Llama(smollm2_path, kv_overrides=fim, n_ctx=1024, n_threads=2, progress=False) as llm:
        want = llm(prefix, suffix=suffix, max_tokens=12, temperature=0)
    flags = [f for key, value in fim.items() for f in ("--override-kv", f"{key}=int:{value}")]
    with ServerProcess(smollm2_path, "-c", "1024", *flags) as s:
        out = httpx.post(
            s.url + "/infill",
            json={"input_prefix": prefix, "input_suffix": suffix, "n_predict": 12, "temperature": 0},
            timeout=60,
        ).json()
        with httpx.stream(
            "POST",
            s.url + "/infill",
            json={"input_prefix": prefix, "input_suffix": suffix, "n_predict": 12, "temperature": 0, "stream": True},
        ) as r:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert out["content"] == want["choices"][0]["text"]
    assert out["tokens_evaluated"] == want["usage"]["prompt_tokens"]
    assert "".join(e["content"] for e in events) == out["content"] and events[-1]["stop"]


def test_images_as_data_uris_and_from_the_media_path(smollm2_path, tmp_path):
    """A tiny synthetic projector (tests/tiny_mmproj.py); each answer equals the in-process Llama's
    for the same requests in the same order (the same slots, the same batch shapes)."""
    import tiny_mmproj
    from test_multimodal import png

    from llama_ffi.high import Llama

    mmproj = tiny_mmproj.write_mmproj(tmp_path / "mmproj.gguf", n_embd_text=576)
    media = tmp_path / "media"
    media.mkdir()
    first, second = png(media / "a.png", 40, 30, 1), png(media / "b.png", 50, 20, 2)
    data_uri = "data:image/png;base64," + base64.b64encode(first.read_bytes()).decode()

    def ask(url: str) -> list[dict]:
        return [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Describe."}],
            }
        ]

    with Llama(smollm2_path, mmproj_path=mmproj, n_ctx=1024, n_threads=2, chat_format="chatml", progress=False) as llm:
        want = [
            llm.create_chat_completion(ask(url), max_tokens=8, temperature=0)["choices"][0]["message"]["content"]
            for url in (data_uri, str(second))
        ]
    with ServerProcess(
        smollm2_path, "-c", "1024", "--mmproj", str(mmproj), "--chat-template", "chatml", "--media-path", str(media)
    ) as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        got = [
            client.chat.completions.create(
                model="SmolLM2-135M-Instruct.Q4_1.gguf", messages=ask(url), max_tokens=8, temperature=0
            )
            .choices[0]
            .message.content
            for url in (data_uri, "file://b.png")
        ]
        assert got == want
        for url in (str(tmp_path / "mmproj.gguf"), "../mmproj.gguf", "http://127.0.0.1:1/a.png"):
            r = httpx.post(s.url + "/v1/chat/completions", json={"messages": ask(url), "max_tokens": 1})
            assert r.status_code == 400 and "messages[0].content[0]" in r.json()["error"]["message"], r.text


def test_lora_adapters_per_request(smollm2_path, tmp_path):
    """--lora applies to every request unless its ``lora`` field says otherwise (llama-server's
    rule); requests under different adapters share the server, each answering as alone."""
    import tiny_adapters

    from llama_ffi.high import Llama

    adapter = tiny_adapters.write_lora(tmp_path / "coder.gguf", smollm2_path, seed=1)
    prompt = "The capital of France is"
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, progress=False) as llm:
        llm.load_lora("a", adapter)
        plain = llm(prompt, max_tokens=12, temperature=0, active_loras=[])["choices"][0]["text"]
        with_adapter = llm(prompt, max_tokens=12, temperature=0, active_loras=[{"name": "a", "scale": 1.0}])
        half = llm(prompt, max_tokens=12, temperature=0, active_loras=[{"name": "a", "scale": 0.5}])
    with_adapter, half = with_adapter["choices"][0]["text"], half["choices"][0]["text"]
    assert with_adapter != plain  # the adapter matters for this prompt
    selections = [[{"name": "a", "scale": 1.0}], [], [{"name": "a", "scale": 0.5}]]
    with ServerProcess(smollm2_path, "-c", "1024", "--lora", str(adapter)) as s:

        def complete(lora):
            body = {"prompt": prompt, "max_tokens": 12, "temperature": 0, **({} if lora is None else {"lora": lora})}
            return httpx.post(s.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]

        assert complete(None) == with_adapter
        assert complete([{"id": 0, "scale": 0}]) == plain
        assert complete([{"id": 0, "scale": 0.5}]) == half
        # llama-server's /lora-adapters: the scale of requests that name none, listed and changed
        listed = httpx.get(s.url + "/lora-adapters").json()
        assert listed == [{"id": 0, "path": str(adapter), "scale": 1.0}]
        assert httpx.post(s.url + "/lora-adapters", json=[{"id": 0, "scale": 0.5}]).json() == {"success": True}
        assert httpx.get(s.url + "/lora-adapters").json()[0]["scale"] == 0.5
        by_default = [complete(None)]  # judged below: the half-scale answer
        assert httpx.post(s.url + "/lora-adapters", json=[]).json() == {"success": True}  # all off
        assert httpx.get(s.url + "/lora-adapters").json()[0]["scale"] == 0.0
        by_default.append(complete(None))  # the plain answer
        r = httpx.post(s.url + "/lora-adapters", json=[{"id": 3, "scale": 1}])
        assert r.status_code == 400 and "lora id 3" in r.json()["error"]["message"]
        assert httpx.post(s.url + "/lora-adapters", json={"id": 0}).status_code == 400
        assert httpx.post(s.url + "/lora-adapters", json=[{"id": 0, "scale": 1}]).json() == {"success": True}
        with concurrent.futures.ThreadPoolExecutor(3) as pool:  # three selections at once
            outs = list(pool.map(complete, [None, [], [{"id": 0, "scale": 0.5}]]))
    # decoded together: each is its selection's greedy answer, or leaves it at a measured near tie
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, progress=False) as llm:
        llm.load_lora("a", adapter)
        # the default scales the server was given: the answers of those selections (a reused prefix
        # decodes the last prompt token alone, which some CPUs compute a little differently)
        by_default_selections = [[{"name": "a", "scale": 0.5}], []]
        for out, selection in zip(outs + by_default, selections + by_default_selections):
            testing.assert_same_or_near_tie(
                llm, prompt, out, 12, limit=testing.parallel_bound(llm), active_loras=selection
            )


def test_errors_map_by_the_library_s_own_types():
    """A client's mistake is a 400 (the library's checks raise RequestValueError or RequestTypeError);
    a built-in ValueError, TypeError or KeyError of a defect is a 500 that does not show its text."""
    from llama_ffi.high import ContextLengthError, RequestTypeError
    from llama_ffi.high.chat.templates import TemplateError
    from llama_ffi.high.errors import RequestValueError
    from llama_ffi.server.errors import from_library

    assert from_library(RequestValueError("top_k must be >= 0")).status == 400
    assert from_library(RequestTypeError("stop must be str")).status == 400
    assert from_library(TemplateError("roles must alternate")).status == 400
    assert from_library(ContextLengthError("too long")).code == "context_length_exceeded"
    defects = (
        ValueError("slot"),
        TypeError("'NoneType' object is not subscriptable"),
        KeyError("slot"),
        RuntimeError(),
    )
    for defect in defects:
        error = from_library(defect)
        assert error.status == 500 and "subscriptable" not in error.message and "slot" not in error.message


def test_every_result_names_the_served_model(client):
    """The library makes each shape with the model name the server passes in (nothing rewrites it)."""
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert client.completions.create(model=name, prompt="Hi", max_tokens=2).model == name
    assert all(c.model == name for c in client.completions.create(model=name, prompt="Hi", max_tokens=2, stream=True))
    messages = [{"role": "user", "content": "Hi"}]
    assert client.chat.completions.create(model=name, messages=messages, max_tokens=2).model == name
    chunks = list(
        client.chat.completions.create(
            model=name, messages=messages, max_tokens=2, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(c.model == name for c in chunks) and chunks[-1].usage.completion_tokens >= 1
