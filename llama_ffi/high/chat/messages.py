"""OpenAI-style chat messages, checked before any template sees them."""

from __future__ import annotations

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
PART_TYPES = {"text"}


def _content_text(content, index: int) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in PART_TYPES:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"message {index}: content part {j} has unsupported type {kind!r}")
            if not isinstance(part.get("text"), str):
                raise ValueError(f"message {index}: content part {j} has no text")
            texts.append(part["text"])
        return "".join(texts)
    raise ValueError(f"message {index}: content must be a string, a list of parts or null")


def validate_messages(messages) -> list[dict]:
    """Copies of the messages with list-of-parts content joined into text; ValueError otherwise."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be a non-empty list of dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"message {i} must be a dict, got {type(m).__name__}")
        if "role" not in m:
            raise ValueError(f"message {i} has no 'role'")
        if m["role"] not in ROLES:
            raise ValueError(f"message {i} has unknown role {m['role']!r} (expected one of {sorted(ROLES)})")
        if "content" not in m and not m.get("tool_calls"):
            raise ValueError(f"message {i} has no 'content'")
        copy = dict(m)
        copy["content"] = _content_text(m.get("content"), i)
        out.append(copy)
    return out
