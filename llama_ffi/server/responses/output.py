"""A chat reply as the Responses API's output items and ``response`` object."""

from __future__ import annotations

import time
import uuid


def output_items(reply: dict) -> list[dict]:
    out = []
    if reply.get("reasoning_content"):
        out.append(
            {
                "type": "reasoning",
                "id": f"rs_{uuid.uuid4().hex}",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reply["reasoning_content"]}],
            }
        )
    if reply.get("content") or not reply.get("tool_calls"):
        out.append(message_item(reply.get("content") or ""))
    for call in reply.get("tool_calls") or []:
        out.append(call_item(call["id"], call["function"]["name"], call["function"]["arguments"]))
    return out


def message_item(text: str, status: str = "completed", mid: str | None = None) -> dict:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status == "completed" else []
    )
    return {
        "type": "message",
        "id": mid or f"msg_{uuid.uuid4().hex}",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def call_item(call_id: str, name: str, arguments: str, status: str = "completed", fid: str | None = None) -> dict:
    return {
        "type": "function_call",
        "id": fid or f"fc_{uuid.uuid4().hex}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response(
    rid: str, body, model: str, output: list[dict], usage: dict | None, status: str, finish: str | None
) -> dict:
    incomplete = {"reason": "max_output_tokens"} if finish == "length" else None
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete and status == "completed" else status,
        "model": model,
        "output": output,
        "usage": _usage(usage) if usage else None,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "previous_response_id": body.previous_response_id,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "tools": body.tools or [],
        "tool_choice": body.tool_choice or "auto",
        "parallel_tool_calls": body.parallel_tool_calls,
        "store": body.store,
        "text": body.text or {"format": {"type": "text"}},
        "metadata": body.metadata or {},
    }


def _usage(usage: dict) -> dict:
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
    }


def history_message(reply: dict) -> dict:
    message = {"role": "assistant", "content": reply.get("content") or ""}
    if reply.get("tool_calls"):
        message["tool_calls"] = reply["tool_calls"]
    return message
