"""A Responses request as a chat request: ``input`` items as chat messages, function tools, the
tool choice and ``text.format``."""

from __future__ import annotations

import json
import logging

from llama_ffi.server.errors import ApiError
from llama_ffi.server.responses import custom_tools

log = logging.getLogger("llama_ffi.server")


def _content(content, where: str):
    """An input message's content as chat content: text, or parts with images."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a string or a list of parts", "input")
    parts = []
    for p, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise ApiError(400, f"{where}.content[{p}]: a {kind!r} part is not supported", "input")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def input_messages(items) -> list[dict]:
    """The request's ``input`` as chat messages."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise ApiError(400, f"{where}.role must be user, assistant, system or developer", "input")
            out.append(
                {"role": "system" if role == "developer" else role, "content": _content(item.get("content"), where)}
            )
        elif kind in ("function_call", "custom_tool_call"):
            given = "arguments" if kind == "function_call" else "input"
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", given)):
                raise ApiError(400, f"{where}: a {kind} needs call_id, name and {given}", "input")
            written = item["arguments"] if kind == "function_call" else custom_tools.arguments(item["input"])
            call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": written}}
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if not isinstance(item.get("call_id"), str):
                raise ApiError(400, f"{where}: a {kind} needs its call_id", "input")
            output = item.get("output")
            content = _content(output, where) if isinstance(output, list) else output
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": content if isinstance(content, (str, list)) else json.dumps(output),
                }
            )
        elif kind == "reasoning":
            continue
        else:
            raise ApiError(400, f"{where}: an item of type {kind!r} is not supported", "input")
    return out


def _tools(tools) -> list[dict] | None:
    """The function tools, and custom tools as functions of one string (``custom_tools``); the
    others (hosted tools, Codex's ``namespace``) have no chat form and are left out, as llama-server
    leaves them: the model is not offered them."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise ApiError(400, f"tools[{i}] must be an object with a type", "tools")
        if tool["type"] == "custom":
            out.append(custom_tools.as_function(tool, f"tools[{i}]"))
            continue
        if tool["type"] != "function":
            log.info("tools[%d]: a %r tool is not offered to the model (only function tools are)", i, tool["type"])
            continue
        if not isinstance(tool.get("name"), str):
            raise ApiError(400, f"tools[{i}]: a function tool needs a name", "tools")
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object"}}
        if tool.get("description"):
            function["description"] = tool["description"]
        if "strict" in tool:
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice):
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def chat_body(body, history: list[dict]) -> dict:
    messages = list(history)
    if body.instructions:  # instructions are not carried over from a previous response
        messages = [m for m in messages if m["role"] != "system"]
        messages.insert(0, {"role": "system", "content": body.instructions})
    messages += input_messages(body.input)
    if not messages:
        raise ApiError(400, "input is empty", "input")
    out: dict = {"messages": messages, "stream": body.stream, "return_progress": body.return_progress}
    if body.max_output_tokens is not None:
        out["max_tokens"] = body.max_output_tokens
    for name in ("temperature", "top_p"):
        if getattr(body, name) is not None:
            out[name] = getattr(body, name)
    tools = _tools(body.tools)
    if tools:
        out["tools"] = tools
        out["parallel_tool_calls"] = body.parallel_tool_calls
        if body.tool_choice is not None:
            out["tool_choice"] = _tool_choice(body.tool_choice)
    fmt = (body.text or {}).get("format") or {}
    if fmt.get("type") == "json_schema":
        out["response_format"] = {"type": "json_schema", "json_schema": {"schema": fmt.get("schema") or {}}}
    elif fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    return out
