"""The search tools: ``file_glob_search`` (files or directories under a path, by glob) and
``grep_search`` (lines matching a pattern). Both skip the junk directories (``runtime.JUNK_DIRS``)
and stop at a limit, saying how many there were."""

from __future__ import annotations

import functools
import posixpath
import re

from llama_ffi.server.agent.tool import Call, Tool, ToolError, integer, schema, text

MAX_RESULTS = 100
GREP_FILE_LIMIT = 4 << 20  # bytes: a larger file is not searched


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern:
    """``**`` any number of directories, ``*`` and ``?`` within one name, ``[...]`` a class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def matches(pattern: str | None, rel: str) -> bool:
    """A pattern without a ``/`` matches a name at any depth; one with a ``/`` the whole path."""
    if not pattern:
        return True
    target = rel if "/" in pattern else posixpath.basename(rel)
    return glob_regex(pattern).match(target) is not None


def _selected(rel: str, include: str | None, exclude: str | None) -> bool:
    return matches(include, rel) and not (exclude and matches(exclude, rel))


def _base(params: dict, call: Call) -> str:
    base = call.path(params, default=call.cwd or ".")
    if not call.place.is_dir(base):
        raise ToolError(f"not a directory: {base}")
    return base


def file_glob_search(params: dict, call: Call) -> dict:
    kind = text(params, "type", "file")
    if kind not in ("file", "dir", "all"):
        raise ToolError(f'invalid type: {kind} (expected "file", "dir" or "all")')
    max_depth = integer(params, "max_depth", 0, 0)
    limit = integer(params, "limit", MAX_RESULTS, 1, MAX_RESULTS)
    include, exclude = text(params, "include") or "**", text(params, "exclude")
    base = _base(params, call)
    found = [
        (rel, is_dir)
        for rel, is_dir in call.place.entries(base, max_depth)
        if (kind == "all" or (kind == "dir") == is_dir) and _selected(rel, include, exclude)
    ]
    found.sort()
    shown = found[:limit]
    lines = [rel + ("/" if is_dir else "") for rel, is_dir in shown]
    out = "\n".join(lines) + f"\n---\nTotal matches: {len(found)}\n"
    if len(found) > limit:
        out += f"[showing the first {limit} of {len(found)}: narrow the pattern to see the rest]\n"
    return {
        "plain_text_response": out,
        "entries": [{"path": rel, "type": "dir" if is_dir else "file"} for rel, is_dir in shown],
    }


def grep_search(params: dict, call: Call) -> dict:
    pattern = text(params, "pattern")
    if not pattern:
        raise ToolError("'pattern' must be a non-empty string")
    flags = re.IGNORECASE if params.get("ignore_case") is True else 0
    try:
        regex = re.compile(re.escape(pattern) if params.get("literal") is True else pattern, flags)
    except re.error as error:
        raise ToolError(f"invalid pattern: {error}") from None
    numbers = params.get("return_line_numbers") is True
    context = integer(params, "context_lines", 0, 0, 10)
    include, exclude = text(params, "include"), text(params, "exclude")
    path = call.path(params, default=call.cwd or ".")
    if call.place.is_dir(path):
        files = [
            (posixpath.join(path, rel), rel)
            for rel, is_dir in call.place.entries(path, 0)
            if not is_dir and _selected(rel, include, exclude)
        ]
    else:
        files = [(path, posixpath.basename(path))]
    out, total = [], 0
    for full, rel in sorted(files, key=lambda f: f[1]):
        try:
            data = call.place.read(full)
        except OSError:
            continue
        if len(data) > GREP_FILE_LIMIT or b"\0" in data[:8192]:
            continue
        lines = data.decode("utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            if not regex.search(line):
                continue
            total += 1
            if total > MAX_RESULTS:
                continue
            for n in range(max(1, number - context), min(len(lines), number + context) + 1):
                mark = ":" if n == number else "-"
                out.append(f"{rel}{mark}{n}{mark}{lines[n - 1]}" if numbers else f"{rel}{mark}{lines[n - 1]}")
            if context:
                out.append("--")
    text_out = "\n".join(out) + f"\n---\nTotal matches: {total}\n"
    if total > MAX_RESULTS:
        text_out += f"[showing the first {MAX_RESULTS} matches: narrow the path, pattern or include]\n"
    return {"plain_text_response": text_out}


TOOLS = (
    Tool(
        "file_glob_search",
        "File search",
        "List files or directories under a path by glob (a pattern without '/' matches names at any "
        "depth); .git, node_modules, build and other junk directories are listed but not searched.",
        schema(
            path=("string", "the directory to search (default: the working directory)"),
            include=("string", 'glob of what to list, e.g. "*.py" or "src/**/*.cpp" (default **)'),
            exclude=("string", "glob of what to leave out"),
            type=("string", '"file" (default), "dir" or "all"'),
            max_depth=("integer", "levels to descend (default 0: all; 1: direct children)"),
            limit=("integer", f"most results returned (default and at most {MAX_RESULTS})"),
        ),
        file_glob_search,
    ),
    Tool(
        "grep_search",
        "Grep search",
        "Find the lines matching a regular expression in a file or under a directory; junk directories "
        "(.git, node_modules, build...) are skipped.",
        schema(
            ("pattern",),
            path=("string", "a file or directory (default: the working directory)"),
            pattern=("string", "a regular expression (a plain string with literal)"),
            include=("string", "glob of the files to search"),
            exclude=("string", "glob of the files to skip"),
            return_line_numbers=("boolean", "give each line's number"),
            literal=("boolean", "the pattern is plain text"),
            ignore_case=("boolean", "match regardless of case"),
            context_lines=("integer", "lines shown around each match (at most 10)"),
        ),
        grep_search,
    ),
)
