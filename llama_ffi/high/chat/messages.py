"""OpenAI-style chat messages, checked before any template sees them."""

from __future__ import annotations

from llama_ffi.high.errors import RequestValueError
from llama_ffi.high.multimodal.media import MEDIA_PART_TYPES  # what extract_media makes of media parts

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
PART_TYPES = {"text", *MEDIA_PART_TYPES}


def _content(content, index: int) -> str | list | None:
    """Text, or (when it holds media) the list of text and media parts, checked."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in PART_TYPES:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestValueError(f"message {index}: content part {j} has unsupported type {kind!r}")
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise RequestValueError(f"message {index}: content part {j} has no text")
        if any(part["type"] in MEDIA_PART_TYPES for part in content):
            return [dict(part) for part in content]
        return joined_text(content)
    raise RequestValueError(f"message {index}: content must be a string, a list of parts or null")


def joined_text(parts: list[dict]) -> str:
    return "".join(part["text"] for part in parts)


def text_only(messages: list[dict]) -> list[dict]:
    """The messages with list contents (text parts only by now) joined into text."""
    return [{**m, "content": joined_text(m["content"])} if isinstance(m.get("content"), list) else m for m in messages]


def validate_messages(messages) -> list[dict]:
    """Copies of the messages with list-of-parts content joined into text (kept as parts where it
    holds media); ValueError otherwise."""
    # an empty list renders what the template adds alone (the generation prompt), as llama-server
    # and llama-cpp-python do
    if not isinstance(messages, (list, tuple)):
        raise RequestValueError(f"messages must be a list of dicts, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestValueError(f"message {i} must be a dict, got {type(m).__name__}")
        if "role" not in m:
            raise RequestValueError(f"message {i} has no 'role'")
        if m["role"] not in ROLES:
            raise RequestValueError(f"message {i} has unknown role {m['role']!r} (expected one of {sorted(ROLES)})")
        if "content" not in m and not m.get("tool_calls"):
            raise RequestValueError(f"message {i} has no 'content'")
        copy = dict(m)
        copy["content"] = _content(m.get("content"), i)
        out.append(copy)
    return out
