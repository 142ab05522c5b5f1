"""The requests the real agent CLIs sent (recorded by ``python -m tools.agent_requests``: Claude Code's
``/v1/messages`` and Codex's ``/v1/responses``, the first turn and the turns after a tool ran, their
long prose replaced by stand-ins), replayed on ``llama-ffi serve`` through the official SDKs' stream
parsers: every one is answered 2xx with a stream those parsers finish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from server_process import ServerProcess

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

RECORDED = sorted((Path(__file__).parent / "data" / "agents").glob("*.json"))
REPLY_TOKENS = 24  # the recorded budgets are the agents' (32000 for Claude Code): a replay needs a few


@pytest.fixture(scope="module")
def server(smollm2_path):
    with ServerProcess(smollm2_path, "-c", "8192", "-np", "1") as s:
        yield s


def test_recordings_cover_both_agents_and_their_tool_turns():
    agents = {path.name.split("-")[0] for path in RECORDED}
    assert agents == {"claude", "codex"}, RECORDED
    for agent in agents:
        bodies = [json.loads(p.read_text())["body"] for p in RECORDED if p.name.startswith(agent)]
        assert len(bodies) >= 2, f"{agent}: the first turn and one after a tool ran"


def _split(body: dict, named: tuple[str, ...]) -> tuple[dict, dict]:
    """(the arguments the SDK method names, the rest as its extra_body): the agent's whole body."""
    return {k: v for k, v in body.items() if k in named}, {k: v for k, v in body.items() if k not in named}


@pytest.mark.parametrize("path", [p for p in RECORDED if p.name.startswith("claude")], ids=lambda p: p.stem)
def test_claude_code_requests_replay(server, path):
    body = {**json.loads(path.read_text())["body"], "max_tokens": REPLY_TOKENS}
    body.pop("stream", None)
    named, extra = _split(body, ("model", "max_tokens", "messages"))
    client = anthropic.Anthropic(base_url=server.url, api_key="local", max_retries=0)
    with client.messages.stream(**named, extra_body=extra, extra_query={"beta": "true"}) as stream:
        final = stream.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use", "stop_sequence")
    assert final.usage.input_tokens > 0


@pytest.mark.parametrize("path", [p for p in RECORDED if p.name.startswith("codex")], ids=lambda p: p.stem)
def test_codex_requests_replay(server, path):
    body = {**json.loads(path.read_text())["body"], "max_output_tokens": REPLY_TOKENS}
    body.pop("stream", None)
    named, extra = _split(body, ("model", "input"))
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="local", max_retries=0)
    events = list(client.responses.create(**named, stream=True, extra_body=extra))
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete"), events[-1]
