"""Prompt progress (llama-server's ``return_progress``): a stream that asks is told, before its first
token, how far its prompt's evaluation is — once when the prompt gets its slot (what the cache
held), then after every decode of its tokens — in the library's chunks and in every server
stream that takes it (completions, chat, llama-server's /completion, Responses)."""

from __future__ import annotations

import asyncio
import json
import math

import httpx
import pytest
from server_process import ServerProcess

from llama_ffi.high import Llama

N_BATCH = 32
PROMPT = "The river runs past the mill and the old stone bridge, " * 6


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_batch=N_BATCH, n_seq_max=1, n_threads=2, progress=False) as m:
        yield m


def split(chunks: list[dict]) -> tuple[list[dict], list[dict]]:
    progress = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
    return progress, [c for c in chunks if "prompt_progress" not in c]


def check_progress(progress: list[dict], n_prompt: int, cached: int) -> None:
    """What the cache held first, then one report per decode of ``N_BATCH`` tokens, to the end."""
    assert progress[0]["processed"] == progress[0]["cache"] == cached
    assert progress[0]["time_ms"] == 0.0
    assert all(p["total"] == n_prompt and p["cache"] == cached for p in progress)
    done = [p["processed"] for p in progress]
    assert done == sorted(set(done)) and done[-1] == n_prompt
    assert all(b - a <= N_BATCH for a, b in zip(done, done[1:]))
    assert len(progress) == 1 + math.ceil((n_prompt - cached) / N_BATCH)
    assert [p["time_ms"] for p in progress] == sorted(p["time_ms"] for p in progress)


def test_a_stream_reports_its_prompt_before_its_tokens(llm):
    n_prompt = len(llm.tokenize(PROMPT.encode()))
    llm.create_completion("Zebra", max_tokens=1)  # the slot holds nothing of the prompt
    chunks = list(llm.create_completion(PROMPT, max_tokens=4, stream=True, return_progress=True, temperature=0))
    progress, text = split(chunks)
    assert n_prompt > 2 * N_BATCH
    check_progress(progress, n_prompt, 0)
    first_text = next(i for i, c in enumerate(chunks) if "prompt_progress" not in c)
    assert first_text == len(progress) and all(c["choices"] == [] for c in chunks[:first_text])
    # the same text as without progress, from the same (empty) cache in the same batches
    llm.create_completion("Zebra", max_tokens=1)
    again = list(llm.create_completion(PROMPT, max_tokens=4, stream=True, temperature=0))
    assert "".join(c["choices"][0]["text"] for c in text) == "".join(c["choices"][0]["text"] for c in again)

    # the prompt again: the cache holds all but its last token, which is decoded alone
    progress, _ = split(list(llm.create_completion(PROMPT, max_tokens=1, stream=True, return_progress=True)))
    check_progress(progress, n_prompt, n_prompt - 1)


def test_only_a_stream_that_asks_gets_progress(llm):
    assert not split(list(llm.create_completion(PROMPT, max_tokens=2, stream=True)))[0]
    whole = llm.create_completion(PROMPT, max_tokens=2, return_progress=True)
    assert "prompt_progress" not in whole and len(whole["choices"]) == 1


def test_chat_and_asyncio_streams_report_progress(llm):
    messages = [{"role": "user", "content": PROMPT}]
    llm.create_completion("Zebra", max_tokens=1)
    chunks = list(llm.create_chat_completion(messages, max_tokens=3, stream=True, return_progress=True))
    progress, rest = split(chunks)
    n_prompt = progress[0]["total"]
    check_progress(progress, n_prompt, 0)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks) and rest[0]["choices"][0]["delta"]["role"]

    async def streamed():
        return [c async for c in await llm.acreate_completion(PROMPT, max_tokens=2, stream=True, return_progress=True)]

    llm.create_completion("Zebra", max_tokens=1)
    progress, _ = split(asyncio.run(streamed()))
    check_progress(progress, len(llm.tokenize(PROMPT.encode())), 0)


# ---- the server ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(smollm2_path):
    with ServerProcess(smollm2_path, "-c", "1024", "-np", "1", "-b", str(N_BATCH), "--metrics") as s:
        yield s


def events(server, path: str, body: dict) -> list[dict]:
    out = []
    with httpx.stream("POST", server.url + path, json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[len("data: ") :]))
    return out


def forget(server) -> None:
    httpx.post(server.url + "/v1/completions", json={"prompt": "Zebra", "max_tokens": 1}, timeout=60)


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/completions", {"prompt": PROMPT}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
        ("/completion", {"prompt": PROMPT, "timings_per_token": True}),
        ("/v1/responses", {"input": PROMPT, "timings_per_token": True}),
    ],
)
def test_server_streams_carry_prompt_progress(server, path, body):
    forget(server)
    limit = {"max_output_tokens": 3} if path == "/v1/responses" else {"max_tokens": 3}  # the Responses API's name
    got = events(server, path, {**body, "stream": True, "return_progress": True, **limit})
    progress = [e["prompt_progress"] for e in got if "prompt_progress" in e]
    check_progress(progress, progress[0]["total"], 0)
    if path == "/v1/responses":
        assert all(e["type"] == "response.in_progress" for e in got if "prompt_progress" in e)
        assert "timings" in got[-1] and got[-1]["type"] == "response.completed"
    if path == "/completion":  # llama-server's timings on each: the prompt's so far, none predicted
        timings = [e["timings"] for e in got if "prompt_progress" in e]
        assert timings[0]["prompt_n"] == 0 and timings[0]["prompt_ms"] == 0.0
        assert [t["prompt_n"] for t in timings] == [p["processed"] for p in progress]
        assert all(t["predicted_n"] == 0 for t in timings)
    # without asking: none
    forget(server)
    plain = events(server, path, {**body, "stream": True, **limit})
    assert not any("prompt_progress" in e for e in plain)
