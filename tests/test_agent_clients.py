"""What the coding agents send, on a one-slot ``llama-ffi serve``: Claude Code's Messages requests
(a billing header that changes every request, a system role inside ``messages``, fields the server
has no use for, more ``max_tokens`` than the context holds) and Codex's Responses requests
(``developer`` messages with item ids, ``namespace`` and ``custom`` tools beside function tools,
``store: false``, tool outputs as parts). Each turn after the first reuses the cached prompt."""

from __future__ import annotations

import json

import httpx
import pytest
from server_process import ServerProcess

READ = {  # the shape of Claude Code's tool schemas
    "name": "Read",
    "description": "Reads a file from the local filesystem.",
    "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "The absolute path of the file"},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "limit": {"type": "integer", "exclusiveMinimum": 0},
        },
        "required": ["file_path"],
        "additionalProperties": False,
    },
    "cache_control": {"type": "ephemeral"},
}
SYSTEM_PROMPT = "You are a coding agent. Answer in one short sentence. " * 8


@pytest.fixture(scope="module")
def server(smollm2_path):
    with ServerProcess(smollm2_path, "-c", "4096", "-np", "1") as s:
        yield s


def events(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


def claude_code_body(stamp: str, messages: list[dict], stream: bool) -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,  # more than the context holds: generation stops where it ends
        "stream": stream,
        "system": [
            {
                "type": "text",
                "text": f"x-anthropic-billing-header: cc_version=2.1.337.a1b; cc_entrypoint=cli; cch={stamp};",
            },
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": SYSTEM_PROMPT},
        ],
        "messages": messages,
        "tools": [READ],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "medium"},
        "metadata": {"user_id": "user_abc_account_def_session_ghi"},
        "temperature": 0,
    }


def test_claude_code_turns_are_served_and_reuse_the_cached_prompt(server):
    turns = [
        {"role": "user", "content": [{"type": "text", "text": "Say hello.", "cache_control": {"type": "ephemeral"}}]},
        {"role": "system", "content": "The user's working directory is /tmp."},  # Claude Code sends these
    ]
    first = httpx.post(
        server.url + "/v1/messages?beta=true", json=claude_code_body("a5145", turns, stream=True), timeout=300
    )
    assert first.status_code == 200, first.text
    stream = events(first)
    assert stream[0]["type"] == "message_start" and stream[-1]["type"] == "message_stop"
    prompt = stream[0]["message"]["usage"]["input_tokens"]
    reply = "".join(e["delta"].get("text", "") for e in stream if e["type"] == "content_block_delta")

    turns += [{"role": "assistant", "content": [{"type": "text", "text": reply}]}, {"role": "user", "content": "Bye."}]
    second = httpx.post(
        server.url + "/v1/messages?beta=true", json=claude_code_body("9e0c2", turns, stream=False), timeout=300
    )
    assert second.status_code == 200, second.text
    usage = second.json()["usage"]
    assert usage["input_tokens"] > prompt
    # the header's stamp differs, yet the whole first prompt comes from the cache
    assert usage["cache_read_input_tokens"] >= prompt - 1, (usage, prompt)


def test_a_system_block_that_is_not_text_is_refused_by_name(server):
    body = claude_code_body("a5145", [{"role": "user", "content": "hi"}], stream=False)
    body["system"].append({"type": "image", "source": {}})
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 400 and "system" in r.json()["error"]["message"]


CODEX_TOOLS = [
    {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"}},
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}}],
    },
    {"type": "custom", "name": "apply_patch", "description": "Patches files.", "format": {"type": "text"}},
    {"type": "web_search"},
]


def codex_body(items: list[dict]) -> dict:
    return {
        "model": "gpt-5.1-codex",
        "stream": True,
        "store": False,
        "input": items,
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a1b2-c3d4",
        "client_metadata": {"session": "s1"},
        "temperature": 0,
        "max_output_tokens": 32,  # Codex sends none; the tiny model might write to the end of the context
    }


def developer(text: str, item_id: str) -> dict:
    return {"type": "message", "id": item_id, "role": "developer", "content": [{"type": "input_text", "text": text}]}


def test_codex_turns_are_served_with_its_tools_and_items(server):
    items = [
        developer(SYSTEM_PROMPT, "msg_1"),
        developer("Sandbox: workspace-write.", "msg_2"),
        {"type": "message", "id": "msg_3", "role": "user", "content": [{"type": "input_text", "text": "List files."}]},
    ]
    first = httpx.post(server.url + "/v1/responses", json=codex_body(items), timeout=300)
    assert first.status_code == 200, first.text
    stream = events(first)
    assert stream[0]["type"] == "response.created" and stream[-1]["type"] == "response.completed"
    prompt = stream[-1]["response"]["usage"]["input_tokens"]

    items += [
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "shell",
            "arguments": '{"command":["ls"]}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": [{"type": "input_text", "text": "README.md\nsetup.py"}],
        },
    ]
    second = httpx.post(server.url + "/v1/responses", json=codex_body(items), timeout=300)
    assert second.status_code == 200, second.text
    done = events(second)[-1]
    assert done["type"] == "response.completed", done
    usage = done["response"]["usage"]
    assert usage["input_tokens"] > prompt
    assert usage["input_tokens_details"]["cached_tokens"] >= prompt - 1, (usage, prompt)
