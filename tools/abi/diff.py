"""Compare two ABI snapshots (or trees) and classify every change as breaking or additive.

Breaking: a struct's size/alignment changed, a field was removed/renamed, retyped, resized or
moved; a function was removed or its signature changed; an enum constant's value changed or it
was removed; a typedef or constant changed or was removed. Additive: a new function, struct,
typedef, enum constant or constant. For every changed symbol the report lists where
``llama_ffi/`` uses it, so the reviewer knows what to re-check.

    python -m tools.abi.diff OLD NEW [--json out.json] [--markdown out.md] [--accept-breaking]

OLD and NEW are snapshot files or llama.cpp trees. Exit status 1 on breaking changes unless
``--accept-breaking``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "llama_ffi"


@dataclasses.dataclass
class Change:
    kind: str  # struct, function, enum, typedef, constant
    symbol: str
    change: str  # added, removed, changed
    breaking: bool
    detail: dict = dataclasses.field(default_factory=dict)
    used_in: list[str] = dataclasses.field(default_factory=list)  # "path:line" of each mention
    used_by: list[str] = dataclasses.field(default_factory=list)  # the name and where it is, per mention


def _struct_change(name: str, old: dict, new: dict) -> Change | None:
    of = {f["name"]: f for f in old["fields"]}
    nf = {f["name"]: f for f in new["fields"]}
    detail: dict = {}
    added = [n for n in nf if n not in of]
    removed = [n for n in of if n not in nf]
    retyped = [
        {"field": n, "old": of[n]["type"], "new": nf[n]["type"]}
        for n in of
        if n in nf and of[n]["type"] != nf[n]["type"]
    ]
    moved = [
        {"field": n, "old": of[n]["offset"], "new": nf[n]["offset"]}
        for n in of
        if n in nf and of[n]["offset"] != nf[n]["offset"]
    ]
    resized = [
        {"field": n, "old": of[n]["size"], "new": nf[n]["size"]}
        for n in of
        if n in nf and of[n]["size"] != nf[n]["size"]
    ]
    order_old = [n for n in of if n in nf]
    order_new = [n for n in nf if n in of]
    for key, value in (
        ("fields_added", added),
        ("fields_removed", removed),
        ("fields_retyped", retyped),
        ("fields_moved", moved),
        ("fields_resized", resized),
    ):
        if value:
            detail[key] = value
    if order_old != order_new:
        detail["fields_reordered"] = True
    for key in ("size", "align"):
        if old.get(key) != new.get(key):
            detail[key] = {"old": old.get(key), "new": new.get(key)}
    if not detail:
        return None
    return Change("struct", name, "changed", True, detail)


def _simple(kind: str, old: dict, new: dict, value) -> list[Change]:
    out = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            out.append(Change(kind, name, "removed", True, {"old": value(old[name])}))
        elif name not in old:
            out.append(Change(kind, name, "added", False, {"new": value(new[name])}))
        elif value(old[name]) != value(new[name]):
            out.append(Change(kind, name, "changed", True, {"old": value(old[name]), "new": value(new[name])}))
    return out


def compare(old: dict, new: dict) -> list[Change]:
    changes: list[Change] = []
    os_, ns = old["structs"], new["structs"]
    for name in sorted(set(os_) | set(ns)):
        if name not in ns:
            changes.append(Change("struct", name, "removed", True, {"old_size": os_[name].get("size")}))
        elif name not in os_:
            changes.append(Change("struct", name, "added", False, {"size": ns[name].get("size")}))
        else:
            c = _struct_change(name, os_[name], ns[name])
            if c:
                changes.append(c)
    changes += _simple("function", old["functions"], new["functions"], lambda f: f["signature"])
    changes += _simple("enum", old["enums"], new["enums"], lambda e: e["value"])
    changes += _simple("typedef", old["typedefs"], new["typedefs"], lambda t: t)
    changes += _simple("constant", old["constants"], new["constants"], lambda c: c)
    return changes


def _identifier(symbol: str) -> str:
    return symbol.split()[-1]


# A field that only moved needs no change of ours: cffi's API mode lets the compiler lay out
# every struct, so regenerating is enough. Uses are looked up for what Python code can notice.
_FIELD_KEYS_TO_READ = ("fields_retyped", "fields_resized")


def _names_to_find(c: Change) -> set[str]:
    names = {_identifier(c.symbol)}
    if c.kind == "struct":
        for key in ("fields_removed", "fields_added"):
            names.update(c.detail.get(key, []))
        names.update(d["field"] for key in _FIELD_KEYS_TO_READ for d in c.detail.get(key, []))
    return names


def _enclosing(lines: list[str], index: int) -> str:
    """The def or class (dotted, outermost first) that line ``index`` (0-based) sits in, or "module"."""
    names: list[str] = []
    indent = len(lines[index]) - len(lines[index].lstrip())
    for line in reversed(lines[:index]):
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        found = re.match(r"(?:async\s+)?(?:def|class)\s+(\w+)", stripped)
        if found and depth < indent:
            names.append(found.group(1))
            indent = depth
            if depth == 0:
                break
    return ".".join(reversed(names)) or "module"


def find_uses(changes: list[Change], package: Path = PACKAGE) -> None:
    """Fill ``used_in`` with file:line of every mention in the package's Python sources, and
    ``used_by`` with the name mentioned and the def or class it is in (line numbers move with every
    commit; the names say what to read)."""
    files = [(p, p.read_text(encoding="utf-8").splitlines()) for p in sorted(package.rglob("*.py"))]
    for c in changes:
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(_names_to_find(c)))) + r")\b")
        for path, lines in files:
            for i, line in enumerate(lines, 1):
                found = pattern.search(line)
                if found:
                    c.used_in.append(f"{path.relative_to(package.parent)}:{i}")
                    c.used_by.append(f"`{found.group(1)}` in `{_enclosing(lines, i - 1)}`")


def _uses_by_file(used_in: list[str], used_by: list[str] | None = None) -> list[str]:
    """``a.py:1, a.py:5, b.py:2`` as ``a.py: 1, 5`` and ``b.py: 2`` (one line a file), each line
    followed by what ``used_by`` says of it."""
    by_file: dict[str, list[str]] = {}
    for k, use in enumerate(used_in):
        path, _, line = use.rpartition(":")
        where = f" ({used_by[k]})" if used_by and k < len(used_by) else ""
        by_file.setdefault(path, []).append(line + where)
    return [f"`{path}`: {', '.join(lines)}" for path, lines in by_file.items()]


def _entry(c: Change, headline: str) -> list[str]:
    out = [headline]
    if c.kind == "struct" and "fields_moved" in c.detail:
        out.append("  - moved fields: regenerating is enough (API mode: the compiler lays out the struct)")
    if c.used_in:
        out.append("  - read these lines of ours:")
        out += [f"    - {line}" for line in _uses_by_file(c.used_in, c.used_by)]
    elif c.breaking:
        out.append("  - not used in llama_ffi/")
    return out


def markdown(changes: list[Change], old_name: str, new_name: str) -> str:
    breaking = [c for c in changes if c.breaking]
    additive = [c for c in changes if not c.breaking]
    out = [
        f"# ABI diff: {old_name} → {new_name}",
        "",
        f"{len(breaking)} breaking, {len(additive)} additive changes.",
        "",
    ]
    by_kind: dict[str, int] = {}
    for c in changes:
        key = f"{c.kind} {c.change}"
        by_kind[key] = by_kind.get(key, 0) + 1
    out += ["| change | count |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in sorted(by_kind.items())]
    out += ["", "## Breaking", ""]
    for c in breaking:
        out += _entry(c, f"- **{c.kind} `{c.symbol}` {c.change}**: {_describe(c)}")
    if not breaking:
        out.append("- none")
    out += ["", "## Additive", ""]
    for c in additive:
        out += _entry(c, f"- {c.kind} `{c.symbol}` added")
    if not additive:
        out.append("- none")
    return "\n".join(out) + "\n"


def _describe(c: Change) -> str:
    d = c.detail
    if c.kind != "struct" or c.change != "changed":
        if "old" in d and "new" in d:
            return f"`{d['old']}` → `{d['new']}`"
        return ", ".join(f"{k}: {v}" for k, v in d.items())
    parts = []
    if "size" in d:
        parts.append(f"size {d['size']['old']} → {d['size']['new']}")
    if "align" in d:
        parts.append(f"align {d['align']['old']} → {d['align']['new']}")
    for key, label in (("fields_added", "fields added"), ("fields_removed", "fields removed")):
        if key in d:
            parts.append(f"{label}: {', '.join(d[key])}")
    if "fields_retyped" in d:
        parts.append("retyped: " + ", ".join(f"{x['field']} {x['old']} → {x['new']}" for x in d["fields_retyped"]))
    if "fields_moved" in d:
        parts.append("moved: " + ", ".join(f"{x['field']} @{x['old']} → @{x['new']}" for x in d["fields_moved"]))
    if d.get("fields_reordered"):
        parts.append("fields reordered")
    return "; ".join(parts)


def refresh(report_json: Path, report_md: Path) -> None:
    """Look the uses of a stored diff up again in today's sources (code moved since the bump) and
    rewrite both reports; the title keeps the two versions the Markdown named."""
    changes = [Change(**{**item, "used_in": [], "used_by": []}) for item in json.loads(report_json.read_text())]
    find_uses(changes)
    title = report_md.read_text().splitlines()[0].removeprefix("# ABI diff: ")
    old_name, _, new_name = title.partition(" → ")
    report_md.write_text(markdown(changes, old_name, new_name))
    report_json.write_text(json.dumps([dataclasses.asdict(c) for c in changes], indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    from tools.abi.snapshot import SnapshotError, load_or_take
    from tools.gen import GenerationError
    from tools.vendor import VendorError

    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--refresh"]:  # --refresh REPORT.json REPORT.md: today's uses of a stored diff
        refresh(Path(argv[1]), Path(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--accept-breaking", action="store_true")
    args = ap.parse_args(argv)
    try:
        old, new = load_or_take(args.old), load_or_take(args.new)
    except (SnapshotError, GenerationError, VendorError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    changes = compare(old, new)
    find_uses(changes)
    report = markdown(changes, old.get("commit", args.old)[:12], new.get("commit", args.new)[:12])
    if args.markdown:
        args.markdown.write_text(report)
    else:
        print(report)
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(c) for c in changes], indent=1) + "\n")
    breaking = sum(c.breaking for c in changes)
    if breaking and not args.accept_breaking:
        print(
            f"{breaking} breaking change(s): re-check the uses listed, then rerun with --accept-breaking",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
