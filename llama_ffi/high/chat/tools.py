"""Function calling: checking ``tools``/``tool_choice``, putting the tools into the prompt,
and parsing the call syntax models emit.

Forced calls (``"required"`` or a named function) are generated in the Hermes form
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` under a constraint built from the
function's parameter schema (``chat.constraint``), so the arguments always validate; so are the
calls a model writes in that form under ``"auto"``. With ``"auto"`` the reply is parsed
for the common families (Hermes/Qwen ``<tool_call>``, Llama 3 JSON, Mistral ``[TOOL_CALLS]``,
functionary ``<function=...>`` / ``>>>name``) and is plain content when none matches.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid

from llama_ffi.high.chat.json_stream import healed
from llama_ffi.high.errors import RequestValueError

MAX_PARALLEL_CALLS = 4
# the start of a Hermes-form call, up to its arguments: what a stream names the call from
HERMES_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*', re.S)


@dataclasses.dataclass(frozen=True)
class ToolPlan:
    functions: dict[str, dict]  # name -> the function's declaration
    mode: str  # "none", "auto", "required" or "named"
    forced: str | None = None  # the function a named tool_choice forces
    parallel: bool = True  # "required" may make several calls (OpenAI's parallel_tool_calls)


def plan(tools, tool_choice) -> ToolPlan:
    """Check ``tools`` and ``tool_choice`` (ValueError naming the problem)."""
    if tools is None:
        if tool_choice not in (None, "none", "auto"):
            raise RequestValueError("tool_choice needs tools")
        return ToolPlan({}, "none")
    if not isinstance(tools, list):
        raise RequestValueError("tools must be a list of {'type': 'function', 'function': {...}}")
    functions = {}
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise RequestValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        name = fn.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", name):
            raise RequestValueError(f"tools[{i}]: function name must be 1-64 letters, digits, _ . or -")
        if name in functions:
            raise RequestValueError(f"tools[{i}]: function {name!r} is declared twice")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise RequestValueError(f"tools[{i}]: parameters must be a JSON Schema object")
        functions[name] = {**fn, "parameters": params}
    if tool_choice is None:
        tool_choice = "auto" if functions else "none"
    if tool_choice in ("none", "auto", "required"):
        return ToolPlan(functions, tool_choice if functions or tool_choice == "none" else "none")
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name") if tool_choice.get("type") == "function" else None
        if name is None:
            raise RequestValueError(
                "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}"
            )
        if name not in functions:
            raise RequestValueError(f"tool_choice names unknown function {name!r} (tools: {sorted(functions)})")
        return ToolPlan(functions, "named", name)
    raise RequestValueError(f"tool_choice must be 'none', 'auto', 'required' or a function, got {tool_choice!r}")


# ---- prompt ----------------------------------------------------------------------------------------
def declarations(functions: dict[str, dict]) -> list[dict]:
    return [{"type": "function", "function": fn} for fn in functions.values()]


def system_prompt(functions: dict[str, dict]) -> str:
    """For templates that know no tools: the Hermes-style instructions as a system message."""
    lines = ["You can call functions. They are described in JSON inside <tools></tools>:", "<tools>"]
    lines += [json.dumps(fn, ensure_ascii=False) for fn in functions.values()]
    lines += ["</tools>", 'To call one, reply with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.']
    return "\n".join(lines)


def inline_messages(messages: list[dict], functions: dict[str, dict]) -> list[dict]:
    """The conversation for a template without tool support: tool instructions in the system
    message, earlier calls as <tool_call> text, tool results as <tool_response> text."""
    out = [dict(m) for m in messages]
    for m in out:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [f"<tool_call>{json.dumps(_call_json(c), ensure_ascii=False)}</tool_call>" for c in m["tool_calls"]]
            m["content"] = "\n".join(([m["content"]] if m.get("content") else []) + calls)
            del m["tool_calls"]
        elif m["role"] == "tool":
            m["content"] = f"<tool_response>{m.get('content') or ''}</tool_response>"
    if not functions:
        return out
    note = system_prompt(functions)
    if out and out[0]["role"] == "system" and isinstance(out[0].get("content"), list):  # it holds media
        out[0]["content"] = [*out[0]["content"], {"type": "text", "text": "\n\n" + note}]
    elif out and out[0]["role"] == "system":
        out[0]["content"] = (out[0].get("content") or "") + "\n\n" + note
    else:
        out.insert(0, {"role": "system", "content": note})
    return out


def has_tool_turns(messages: list[dict]) -> bool:
    return any(m["role"] == "tool" or m.get("tool_calls") for m in messages)


def _call_json(call: dict) -> dict:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return {"name": fn.get("name"), "arguments": args}


# ---- parsing ----------------------------------------------------------------------------------------
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FUNCTIONARY = re.compile(r"<function=([A-Za-z0-9_.\-]+)>\s*(.*?)\s*(?:</function>|$)", re.S)
_FUNCTIONARY_V3 = re.compile(r">>>\s*([A-Za-z0-9_.\-]+)\s*\n(.*?)(?=>>>|$)", re.S)


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _json_completed(text: str):
    """The JSON value ``text`` holds, completed where ``max_tokens`` cut it (as llama-server heals a
    cut call: a cut key left out, strings and brackets closed); None when it starts none."""
    value = _json(text)
    if value is None and text:
        whole = healed(text)
        value = None if whole is None else json.loads(whole)
    return value


def _as_call(obj, functions) -> dict | None:
    if not isinstance(obj, dict) or obj.get("name") not in functions:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        args = _json(args)
    if not isinstance(args, dict):
        return None
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)},
    }


def parse_tool_calls(text: str, functions: dict[str, dict]) -> tuple[str | None, list[dict]]:
    """(content left over, tool calls) from a reply; ``(text, [])`` when it holds no call."""
    found: list[dict] = []
    rest = text
    if "<tool_call>" in text:  # Hermes, Qwen
        found = [c for c in (_as_call(_json(m), functions) for m in _HERMES.findall(text)) if c]
        rest = _HERMES.sub("", text)
    elif "[TOOL_CALLS]" in text:  # Mistral
        head, _, tail = text.partition("[TOOL_CALLS]")
        value = _json(tail.strip())
        if value is None and "[ARGS]" in tail:  # [TOOL_CALLS]name[ARGS]{...}, once per call
            value = []
            for call in tail.split("[TOOL_CALLS]"):
                name, _, args = call.partition("[ARGS]")
                value.append({"name": name.strip(), "arguments": _json_completed(args.strip())})
        elif value is None:  # [TOOL_CALLS][{...}, ...] cut short
            value = _json_completed(tail.strip())
        items = value if isinstance(value, list) else [value]
        found = [c for c in (_as_call(v, functions) for v in items) if c]
        rest = head
    elif "<function=" in text:  # functionary v3.1
        found = [
            c
            for c in (_as_call({"name": n, "arguments": _json(a)}, functions) for n, a in _FUNCTIONARY.findall(text))
            if c
        ]
        rest = _FUNCTIONARY.sub("", text)
    elif text.lstrip().startswith(">>>"):  # functionary v3
        found = [
            c
            for c in (
                _as_call({"name": n, "arguments": _json(a.strip())}, functions)
                for n, a in _FUNCTIONARY_V3.findall(text)
            )
            if c
        ]
        rest = ""
    else:  # Llama 3: the reply is JSON
        body = text.replace("<|python_tag|>", "").strip()
        parts = [_json(p) for p in body.split(";")] if body.startswith("{") else []
        calls = [_as_call(p, functions) for p in parts]
        if calls and all(calls):
            found, rest = calls, ""
    if not found:
        return text, []
    rest = rest.strip()
    return (rest or None), found


def cut_call(text: str, functions: dict[str, dict]) -> tuple[str, dict | None]:
    """A reply that ``max_tokens`` cut inside a Hermes-form call: (the text before that call, the
    call with its arguments completed), as the stream ends it; ``(text, None)`` otherwise."""
    start = text.rfind("<tool_call>")
    head = HERMES_HEAD.match(text, start + len("<tool_call>")) if start >= 0 else None
    if head is None or "</tool_call>" in text[start:]:
        return text, None  # no call, a whole one, or one cut before its arguments began
    arguments = text[head.end() :]
    whole = healed(arguments) if arguments.strip() else "{}"
    if whole is None:
        return text, None
    call = _as_call({"name": json.loads(f'"{head.group(1)}"'), "arguments": json.loads(whole)}, functions)
    return (text[:start], call) if call is not None else (text, None)
