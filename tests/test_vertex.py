"""Vertex AI's prediction protocol (``AIP_MODE=PREDICTION``), on a real server: the predict route
answers each instance through the route its ``@requestFormat`` names (a camelCase name or a path),
in order, one error per bad instance; streaming is turned off; ``AIP_HEALTH_ROUTE`` answers as
/health and ``AIP_HTTP_PORT`` is the port the server listens on."""

from __future__ import annotations

import httpx
from server_process import ServerProcess, free_port

CHAT = {"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8, "temperature": 0}


def test_predictions_go_through_the_named_routes(smollm2_path):
    server = ServerProcess(
        smollm2_path, "-c", "1024", "-np", "2", env={"AIP_MODE": "PREDICTION", "AIP_HEALTH_ROUTE": "/ping"}
    )
    port = free_port()  # Vertex's port wins over --port
    server.env["AIP_HTTP_PORT"] = str(port)
    server.url = f"http://127.0.0.1:{port}"
    with server:
        assert httpx.get(server.url + "/ping", timeout=10).json() == {"status": "ok"}
        instances = [
            {"@requestFormat": "chatCompletions", **CHAT},
            {"@requestFormat": "/v1/completions", "prompt": "The capital of", "max_tokens": 4, "stream": True},
            {"@requestFormat": "tokenize", "content": "Hello world"},
            {"prompt": "no format"},
            {"@requestFormat": "noSuchRoute"},
            "not an object",
        ]
        response = httpx.post(server.url + "/predict", json={"instances": instances}, timeout=120)
        assert response.status_code == 200, response.text
        chat, completion, tokens, *errors = response.json()["predictions"]
        assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["content"]
        assert completion["object"] == "text_completion" and completion["choices"][0]["text"]  # JSON, not SSE
        direct = httpx.post(server.url + "/tokenize", json={"content": "Hello world"}, timeout=10).json()
        assert tokens == direct and tokens["tokens"]
        messages = [e["error"]["message"] for e in errors]
        assert messages == [
            "each instance must include a string @requestFormat",
            "no handler registered for @requestFormat: noSuchRoute",
            "each instance must be a JSON object",
        ]
        bad = httpx.post(server.url + "/predict", json={"instances": {}}, timeout=10)
        assert bad.status_code == 400 and "instances" in bad.json()["error"]["message"]
