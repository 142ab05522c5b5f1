"""The file tools: ``read_file`` (a line range, with line numbers if asked), ``write_file`` (parents
made) and ``edit_file`` (exact replacements, each of text found once, none overlapping)."""

from __future__ import annotations

from llama_ffi.server.agent.tool import Call, Tool, ToolError, integer, schema, text

READ_LIMIT = 16 * 1024  # characters of a file returned at once: a small model's context is small


def _read_text(call: Call, path: str) -> str:
    try:
        data = call.place.read(path)
    except FileNotFoundError:
        raise ToolError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise ToolError(f"{path} is a directory") from None
    except OSError as error:
        raise ToolError(f"cannot read {path}: {error.strerror or error}") from None
    if b"\0" in data[:8192]:
        raise ToolError(f"{path} is a binary file")
    return data.decode("utf-8", errors="replace")


def read_file(params: dict, call: Call) -> dict:
    path = call.path(params)
    content = _read_text(call, path)
    start = integer(params, "start_line", 1, 1)
    end = integer(params, "end_line", -1, -1)
    numbered = params.get("append_loc") is True
    if start == 1 and end == -1 and not numbered and len(content) <= READ_LIMIT:
        return {"plain_text_response": content}
    lines = content.splitlines(keepends=True)
    stop = len(lines) if end == -1 else min(end, len(lines))
    if end != -1 and end < start:
        raise ToolError(f"end_line {end} is before start_line {start}")
    out, size = [], 0
    for number in range(start, stop + 1):
        line = f"{number}: {lines[number - 1]}" if numbered else lines[number - 1]
        if size + len(line) > READ_LIMIT:
            out.append(f"\n[truncated at line {number - 1} of {len(lines)}: read on with start_line={number}]\n")
            break
        out.append(line)
        size += len(line)
    return {"plain_text_response": "".join(out)}


def write_file(params: dict, call: Call) -> dict:
    path = call.path(params)
    content = text(params, "content")
    if content is None:
        raise ToolError("'content' is required")
    data = content.encode("utf-8")
    try:
        call.place.write(path, data)
    except OSError as error:
        raise ToolError(f"cannot write {path}: {error.strerror or error}") from None
    return {"result": "file written successfully", "path": path, "bytes": len(data)}


def edit_file(params: dict, call: Call) -> dict:
    path = call.path(params)
    edits = params.get("edits")
    if not isinstance(edits, list) or not edits:
        raise ToolError("'edits' must be a non-empty list of {old_text, new_text}")
    content = _read_text(call, path)
    spans = []  # (start, end, new text, index)
    for i, edit in enumerate(edits):
        if not isinstance(edit, dict) or not isinstance(edit.get("old_text"), str) or not edit["old_text"]:
            raise ToolError(f"edits[{i}].old_text must be a non-empty string")
        new = edit.get("new_text", "")
        if not isinstance(new, str):
            raise ToolError(f"edits[{i}].new_text must be a string")
        old = edit["old_text"]
        found = content.count(old)
        if found == 0:
            raise ToolError(f"edits[{i}].old_text was not found in {path}")
        if found > 1:
            raise ToolError(f"edits[{i}].old_text occurs {found} times in {path}: it must be unique")
        start = content.index(old)
        spans.append((start, start + len(old), new, i))
    spans.sort()
    for before, after in zip(spans, spans[1:]):
        if after[0] < before[1]:
            raise ToolError(f"edits[{before[3]}] and edits[{after[3]}] overlap in {path}: merge them into one edit")
    for start, end, new, _ in reversed(spans):
        content = content[:start] + new + content[end:]
    try:
        call.place.write(path, content.encode("utf-8"))
    except OSError as error:
        raise ToolError(f"cannot write {path}: {error.strerror or error}") from None
    return {"result": "file edited successfully", "path": path, "edits_applied": len(spans)}


TOOLS = (
    Tool(
        "read_file",
        "Read file",
        "Read a text file, whole or a range of lines (1-based, inclusive); long files are cut, "
        "read on from the line named.",
        schema(
            ("path",),
            path=("string", "the file"),
            start_line=("integer", "first line to read (default 1)"),
            end_line=("integer", "last line to read (default: the end)"),
            append_loc=("boolean", "prefix each line with its number"),
        ),
        read_file,
    ),
    Tool(
        "write_file",
        "Write file",
        "Write a file whole, making it and its directories if needed (edit_file changes parts of one).",
        schema(("path", "content"), path=("string", "the file"), content=("string", "its new content")),
        write_file,
        writes=True,
    ),
    Tool(
        "edit_file",
        "Edit file",
        "Replace exact text in a file. Each edits[].old_text must occur once in the file and not overlap "
        "another edit's; write_file replaces a whole file.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file"},
                "edits": {
                    "type": "array",
                    "description": "the replacements",
                    "items": {
                        "type": "object",
                        "properties": {
                            "old_text": {"type": "string", "description": "text found once in the file"},
                            "new_text": {"type": "string", "description": "what replaces it"},
                        },
                        "required": ["old_text", "new_text"],
                    },
                },
            },
            "required": ["path", "edits"],
        },
        edit_file,
        writes=True,
    ),
)
