"""The Responses API's custom (freeform) tools as chat functions. A custom tool takes one string,
free or following a Lark or regex grammar (Codex's ``apply_patch`` in its freeform form). Chat
templates know only functions, so the model is offered a function of one string argument,
``input``, and the grammar becomes that string's ``pattern``, which the structured-output engine
enforces on the string's characters however they are escaped; the call comes back as a
``custom_tool_call`` with the string itself."""

from __future__ import annotations

import json

from llama_ffi.high.constraints import ConstraintError
from llama_ffi.high.constraints.lark_regex import lark_to_regex
from llama_ffi.server.errors import ApiError


def as_function(tool: dict, where: str) -> dict:
    """The chat function offered for the custom tool ``tool`` (``where``: its place, for errors)."""
    if not isinstance(tool.get("name"), str):
        raise ApiError(400, f"{where}: a custom tool needs a name", "tools")
    text = {"type": "string"}
    fmt = tool.get("format") or {"type": "text"}
    if fmt.get("type") == "grammar":
        text["pattern"] = f"^(?:{_regex(fmt, where)})$"
    elif fmt.get("type") != "text":
        raise ApiError(400, f"{where}.format.type must be text or grammar", "tools")
    function = {
        "name": tool["name"],
        "parameters": {
            "type": "object",
            "properties": {"input": text},
            "required": ["input"],
            "additionalProperties": False,
        },
        "strict": True,  # a grammar the call cannot be held to is a 400, not a loose call
    }
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _regex(fmt: dict, where: str) -> str:
    definition, syntax = fmt.get("definition"), fmt.get("syntax")
    if not isinstance(definition, str):
        raise ApiError(400, f"{where}.format.definition must be a string", "tools")
    if syntax == "regex":
        return definition
    if syntax == "lark":
        try:
            return lark_to_regex(definition, f"{where}'s Lark grammar")
        except ConstraintError as error:
            raise ApiError(400, str(error), "tools") from None
    raise ApiError(400, f"{where}.format.syntax must be lark or regex", "tools")


def names(tools: list[dict] | None) -> set[str]:
    """The names of the request's custom tools."""
    return {t["name"] for t in tools or [] if isinstance(t, dict) and t.get("type") == "custom" and "name" in t}


def arguments(text: str) -> str:
    """A custom tool's input as the arguments of the function that stands for it."""
    return json.dumps({"input": text}, ensure_ascii=False)


def input_of(arguments_text: str) -> str:
    """The input written as the function's arguments (the text itself where the model wrote no
    object: a call parsed from a family whose calls are not constrained)."""
    try:
        parsed = json.loads(arguments_text)
    except ValueError:
        return arguments_text
    return parsed["input"] if isinstance(parsed, dict) and isinstance(parsed.get("input"), str) else arguments_text
