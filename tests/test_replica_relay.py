"""The prefix ingress's two halves without Ray (tests/test_replicas.py runs them on a cluster):
``prefix_key`` gives a conversation's turns one key and other conversations others, and ``relay``
runs a real server app on a request and hands back its response's messages, streams included."""

from __future__ import annotations

import asyncio
import json

import pytest

from llama_ffi.high import Llama
from llama_ffi.server import app as server_app
from llama_ffi.server.replica_relay import portable_scope, prefix_key, relay


def chat(first_user: str, *later: str, system: str = "Be brief.") -> bytes:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": first_user}]
    for text in later:
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": text}]
    return json.dumps({"model": "m", "messages": messages}).encode()


def test_a_conversations_turns_share_a_key_and_others_do_not():
    first = prefix_key([], chat("I am Ann."))
    assert first is not None and first == prefix_key([], chat("I am Ann.", "and then?", "more?"))
    assert first != prefix_key([], chat("I am Bob."))
    assert first != prefix_key([], chat("I am Ann.", system="Be long."))
    completion = prefix_key([], json.dumps({"prompt": "x" * 5000 + "tail one"}).encode())
    assert completion == prefix_key([], json.dumps({"prompt": "x" * 5000 + "tail two"}).encode())
    assert prefix_key([(b"X-Session-Id", b"s1")], chat("I am Ann.")) == "session:s1"
    for body in (b"not json", b"[1]", b"{}", json.dumps({"model": "m"}).encode()):
        assert prefix_key([], body) is None


@pytest.fixture(scope="module")
def app(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=512, n_threads=2, n_seq_max=2, progress=False) as llm:
        yield server_app(llm, alias="m")


def relayed(app, path: str, body: dict) -> list[dict]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"x")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        "extra": "not sent",
    }

    async def collect():
        return [m async for m in relay(app, portable_scope(scope), json.dumps(body).encode())]

    return asyncio.run(collect())


def test_relay_hands_back_the_apps_response_whole_and_streamed(app):
    start, *bodies = relayed(app, "/v1/completions", {"prompt": "Hello", "max_tokens": 4, "temperature": 0})
    assert start["type"] == "http.response.start" and start["status"] == 200
    answer = json.loads(b"".join(m.get("body", b"") for m in bodies))
    assert answer["usage"]["completion_tokens"] == 4
    start, *events = relayed(app, "/v1/completions", {"prompt": "Hello", "max_tokens": 4, "stream": True})
    text = b"".join(m.get("body", b"") for m in events).decode()
    assert start["status"] == 200 and text.count("data: ") == 5 + 1 and text.rstrip().endswith("[DONE]")
    assert len(events) >= 5  # one message per event: the stream is relayed as it comes
    start, *bodies = relayed(app, "/v1/completions", {"prompt": 3})
    assert start["status"] == 400 and "error" in json.loads(b"".join(m.get("body", b"") for m in bodies))
