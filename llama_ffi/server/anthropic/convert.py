"""A Messages request as the OpenAI chat request it means: system prompt, turns, images, tools and
tool results, stop sequences, thinking."""

from __future__ import annotations

import json
import re
from typing import Any

from llama_ffi.server.errors import ApiError


def _text_of(blocks, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise ApiError(400, f"{where} must be a string or a list of text blocks", where)
    out = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise ApiError(400, f"{where}[{i}] must be a text block", where)
        out.append(block["text"])
    return "".join(out)


# Claude Code's first system block: "x-anthropic-billing-header: cc_version=…; cch=a5145;" where cch
# changes on every request. It means nothing to a local model, but left as sent it would end the
# cached prefix of every turn at the first line, so it is written with one fixed stamp, as
# llama-server writes it.
BILLING_HEADER = "x-anthropic-billing-header:"
_STAMP = re.compile(r"(\bcch=)[^;\s]*;")


def _system_text(blocks, where: str) -> str:
    """A system prompt's text, each block's billing header stamped alike."""
    if not isinstance(blocks, list):
        return _normalized(_text_of(blocks, where))
    _text_of(blocks, where)  # each one a text block, or a 400 naming it
    return "".join(_normalized(block["text"]) for block in blocks)


def _normalized(text: str) -> str:
    if not text.startswith(BILLING_HEADER):
        return text
    line, newline, rest = text.partition("\n")
    return _STAMP.sub(r"\1fffff;", line, count=1) + newline + rest


def _result_of(blocks, where: str) -> str | list[dict]:
    """A tool result's content: its text, or text and image parts (a tool that read an image)."""
    if not isinstance(blocks, list) or not any(isinstance(b, dict) and b.get("type") == "image" for b in blocks):
        return _text_of(blocks, where)
    parts = []
    for i, block in enumerate(blocks):
        if isinstance(block, dict) and block.get("type") == "image":
            parts.append(_image(block, f"{where}[{i}]"))
        else:
            parts.append({"type": "text", "text": _text_of([block], f"{where}[{i}]")})
    return parts


def _image(block: dict, where: str) -> dict:
    source = block.get("source")
    if not isinstance(source, dict):
        raise ApiError(400, f"{where}.source is required", where)
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return {"type": "image_url", "image_url": {"url": f"data:{source.get('media_type')};base64,{source['data']}"}}
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return {"type": "image_url", "image_url": {"url": source["url"]}}  # refused later unless allowed
    raise ApiError(400, f"{where}.source must be base64 data or a url", where)


def _turn(message: dict, m: int) -> list[dict]:
    """One Anthropic turn as OpenAI messages: tool results become tool messages (first), tool_use
    blocks the assistant's tool_calls."""
    where = f"messages[{m}]"
    role = message.get("role")
    if role == "system":  # Claude Code sends these mid-conversation; the template places them
        return [{"role": "system", "content": _system_text(message.get("content") or "", f"{where}.content")}]
    if role not in ("user", "assistant"):
        raise ApiError(400, f"{where}.role must be user, assistant or system", where)
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a string or a list of blocks", where)
    parts, calls, results, thinking = [], [], [], []
    for b, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        here = f"{where}.content[{b}]"
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and role == "user":
            parts.append(_image(block, here))
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise ApiError(400, f"{here}: tool_use needs an id and a name", here)
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append(
                {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}
            )
        elif kind == "tool_result" and role == "user":
            if not isinstance(block.get("tool_use_id"), str):
                raise ApiError(400, f"{here}: tool_result needs its tool_use_id", here)
            result = _result_of(block.get("content") or "", here + ".content")
            if block.get("is_error"):
                result = (
                    f"Error: {result}" if isinstance(result, str) else [{"type": "text", "text": "Error: "}, *result]
                )
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": result})
        elif kind == "thinking" and role == "assistant" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])  # the template decides whether the model sees it again
        elif kind == "redacted_thinking" and role == "assistant":
            continue  # encrypted by Anthropic: nothing a local model can read
        else:
            raise ApiError(400, f"{here}: a {kind!r} block is not allowed in a {role} turn", here)
    out = list(results)
    if parts or calls or thinking or not results:
        text_only = all(p["type"] == "text" for p in parts)
        body: Any = "".join(p["text"] for p in parts) if text_only else parts
        message_out: dict = {"role": role, "content": body}
        if calls:
            message_out["tool_calls"] = calls
        if thinking:
            message_out["reasoning_content"] = "\n\n".join(thinking)
        out.append(message_out)
    return out


def chat_body(body) -> dict:
    """The OpenAI chat request an Anthropic one means."""
    messages = []
    if body.system:
        messages.append({"role": "system", "content": _system_text(body.system, "system")})
    for m, message in enumerate(body.messages):
        if not isinstance(message, dict):
            raise ApiError(400, f"messages[{m}] must be an object", "messages")
        messages += _turn(message, m)
    out: dict = {"messages": messages}
    if body.tools:
        out["tools"] = [_tool(t, i) for i, t in enumerate(body.tools)]
    if getattr(body, "tool_choice", None):
        out["tool_choice"] = _tool_choice(body.tool_choice)
    if body.tools:  # Anthropic's default: several calls, unless disable_parallel_tool_use
        out["parallel_tool_calls"] = not (getattr(body, "tool_choice", None) or {}).get("disable_parallel_tool_use")
    for name in ("max_tokens", "temperature", "top_p", "top_k", "stream"):
        value = getattr(body, name, None)
        if value is not None:
            out[name] = value
    if getattr(body, "stop_sequences", None):
        out["stop"] = body.stop_sequences
    thinking = getattr(body, "thinking", None) or {}
    if thinking.get("type") == "enabled" and isinstance(thinking.get("budget_tokens"), int):
        out["reasoning_budget"] = thinking["budget_tokens"]
    elif thinking.get("type") == "disabled":
        out["chat_template_kwargs"] = {"enable_thinking": False}
    return out


def _tool(tool: dict, i: int) -> dict:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise ApiError(400, f"tools[{i}] needs a name", "tools")
    function = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
    if tool.get("description"):
        function["description"] = tool["description"]
    if "strict" in tool:  # its input must follow input_schema, or the request fails naming it
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _tool_choice(choice: dict) -> Any:
    kind = choice.get("type")
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    if kind == "none":
        return "none"
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise ApiError(400, "tool_choice must be auto, any, none, or {type: tool, name}", "tool_choice")
