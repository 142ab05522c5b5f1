"""ABI snapshot and diff: mutate copies of the real headers and check the diff reports exactly
that change, with the right classification; the committed snapshot is current; the guard works."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from header_copies import copy_headers, insert_before_closing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.abi import diff, snapshot

REPO = Path(__file__).resolve().parent.parent
STRUCT = "struct llama_context_params"
SLOW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def base(tree, tmp_path_factory):
    root = copy_headers(tree, tmp_path_factory.mktemp("base"))
    return root, snapshot.take(root, "base")


def mutated(base, tmp_path, edit) -> tuple[dict, list[diff.Change]]:
    root, snap = base
    work = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
    copy_headers_from(root, work)
    edit(work)
    new = snapshot.take(work, "mutated")
    return new, diff.compare(snap, new)


def copy_headers_from(src: Path, dest: Path) -> None:
    import shutil

    shutil.copytree(src, dest)


def struct_body(text: str, tag: str) -> tuple[int, int]:
    """Line range (start, end) of the field lines of ``struct tag { ... };``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"\s*struct {tag}\s*{{", line))
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("};"))
    return start + 1, end


def field_lines(text: str, tag: str) -> list[int]:
    a, b = struct_body(text, tag)
    lines = text.splitlines()
    return [
        i for i in range(a, b) if re.match(r"\s*[a-z_][\w\s\*]*\s\**\w+;\s*(//.*)?$", lines[i]) and "(" not in lines[i]
    ]


def field_name(line: str) -> str:
    return re.search(r"(\w+);", line).group(1)


LLAMA_H = "include/llama.h"


def _edit_lines(path: Path, fn) -> None:
    lines = path.read_text().splitlines(keepends=True)
    fn(lines)
    path.write_text("".join(lines))


def only(changes, kind=None):
    return [c for c in changes if kind is None or c.kind == kind]


@pytest.fixture(scope="module")
def llama_h_fields(base):
    text = (base[0] / LLAMA_H).read_text()
    return field_lines(text, "llama_context_params")


@SLOW
@given(data=st.data())
def test_inserted_field_is_reported_alone(base, tmp_path, llama_h_fields, data):
    at = data.draw(st.sampled_from(llama_h_fields))
    new_field = "llama_ffi_probe_field"
    _, changes = mutated(
        base,
        tmp_path,
        lambda root: _edit_lines(root / LLAMA_H, lambda ls: ls.insert(at, f"        int64_t {new_field};\n")),
    )
    assert [(c.kind, c.symbol, c.change, c.breaking) for c in changes] == [("struct", STRUCT, "changed", True)]
    d = changes[0].detail
    assert d["fields_added"] == [new_field]
    assert "fields_removed" not in d and "fields_retyped" not in d


@SLOW
@given(data=st.data())
def test_removed_field_is_reported_alone(base, tmp_path, llama_h_fields, data):
    at = data.draw(st.sampled_from(llama_h_fields))
    name = field_name((base[0] / LLAMA_H).read_text().splitlines()[at])
    _, changes = mutated(base, tmp_path, lambda root: _edit_lines(root / LLAMA_H, lambda ls: ls.pop(at)))
    assert [(c.symbol, c.breaking) for c in changes] == [(STRUCT, True)]
    assert changes[0].detail["fields_removed"] == [name]
    assert "fields_added" not in changes[0].detail


@SLOW
@given(data=st.data())
def test_retyped_field_is_reported_alone(base, tmp_path, llama_h_fields, data):
    lines = (base[0] / LLAMA_H).read_text().splitlines()
    at = data.draw(st.sampled_from(llama_h_fields))
    name = field_name(lines[at])
    _, changes = mutated(
        base,
        tmp_path,
        lambda root: _edit_lines(root / LLAMA_H, lambda ls: ls.__setitem__(at, f"        double {name};\n")),
    )
    old_type = next(f["type"] for f in base[1]["structs"][STRUCT]["fields"] if f["name"] == name)
    if old_type == "double":
        assert changes == []
        return
    assert [c.symbol for c in changes] == [STRUCT]
    assert changes[0].detail["fields_retyped"] == [{"field": name, "old": old_type, "new": "double"}]
    assert "fields_added" not in changes[0].detail and "fields_removed" not in changes[0].detail


@SLOW
@given(data=st.data())
def test_reordered_fields_are_reported_alone(base, tmp_path, llama_h_fields, data):
    i = data.draw(st.integers(0, len(llama_h_fields) - 2))
    a, b = llama_h_fields[i], llama_h_fields[i + 1]
    if b != a + 1:
        return

    def swap(ls):
        ls[a], ls[b] = ls[b], ls[a]

    _, changes = mutated(base, tmp_path, lambda root: _edit_lines(root / LLAMA_H, swap))
    assert [c.symbol for c in changes] == [STRUCT]
    d = changes[0].detail
    assert d.get("fields_reordered") is True and changes[0].breaking
    assert "fields_added" not in d and "fields_removed" not in d and "fields_retyped" not in d


def explicit_enumerators(text: str) -> list[tuple[int, str, int]]:
    """(line, name, value) of enumerators written NAME = <int>, whose successor is explicit too."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines[:-1]):
        m = re.match(r"\s*(LLAMA_[A-Z0-9_]+)\s*=\s*(-?\d+)\s*,?\s*(//.*)?$", line)
        nxt = lines[i + 1].strip()
        if m and (nxt.startswith("};") or re.match(r"LLAMA_[A-Z0-9_]+\s*=\s*-?\d+", nxt)):
            out.append((i, m.group(1), int(m.group(2))))
    return out


@SLOW
@given(data=st.data())
def test_changed_enum_value_is_reported_alone(base, tmp_path, data):
    at, name, value = data.draw(st.sampled_from(explicit_enumerators((base[0] / LLAMA_H).read_text())))
    _, changes = mutated(
        base,
        tmp_path,
        lambda root: _edit_lines(root / LLAMA_H, lambda ls: ls.__setitem__(at, f"        {name} = {value + 1000},\n")),
    )
    assert [(c.kind, c.symbol, c.change, c.breaking) for c in changes] == [("enum", name, "changed", True)]
    assert changes[0].detail == {"old": value, "new": value + 1000}


def one_line_functions(text: str) -> list[tuple[int, str]]:
    out = []
    for i, line in enumerate(text.splitlines()):
        m = re.match(r"\s*LLAMA_API [\w\s\*]+?\b(llama_\w+)\((.+,.+)\);\s*$", line)
        if m and "(*" not in m.group(2):
            out.append((i, m.group(1)))
    return out


@SLOW
@given(data=st.data(), drop=st.booleans())
def test_changed_or_dropped_parameter_is_reported_alone(base, tmp_path, data, drop):
    at, name = data.draw(st.sampled_from(one_line_functions((base[0] / LLAMA_H).read_text())))

    def edit(ls):
        head, args = ls[at].rstrip().rsplit("(", 1)
        params = args[:-2].split(",")
        params = params[:-1] if drop else params[:-1] + [" double llama_ffi_changed"]
        ls[at] = f"{head}({','.join(params)});\n"

    _, changes = mutated(base, tmp_path, lambda root: _edit_lines(root / LLAMA_H, edit))
    assert [(c.kind, c.symbol, c.change, c.breaking) for c in changes] == [("function", name, "changed", True)]


@SLOW
@given(n=st.integers(0, 10_000))
def test_added_function_is_additive(base, tmp_path, n):
    _, changes = mutated(
        base,
        tmp_path,
        lambda root: insert_before_closing(
            root / LLAMA_H, f"    LLAMA_API int32_t llama_ffi_added_{n}(const char * text);"
        ),
    )
    assert [(c.kind, c.symbol, c.change, c.breaking) for c in changes] == [
        ("function", f"llama_ffi_added_{n}", "added", False)
    ]


def test_unchanged_tree_has_no_changes(base):
    assert diff.compare(base[1], base[1]) == []


def test_committed_snapshot_is_current(tree):
    committed = json.loads((REPO / "headers/abi.json").read_text())
    assert diff.compare(committed, snapshot.take(tree.path, tree.label)) == []
    assert committed["commit"] == tree.label


def test_snapshot_is_measured_by_the_compiler(tree):
    from llama_ffi import ffi

    snap = json.loads((REPO / "headers/abi.json").read_text())
    for name in (
        "struct llama_context_params",
        "struct llama_model_params",
        "struct llama_batch",
        "struct ggml_tensor",
        "struct gguf_init_params",
    ):
        s = snap["structs"][name]
        assert s["size"] == ffi.sizeof(name)
        for f in s["fields"]:
            assert f["offset"] == ffi.offsetof(name, f["name"]), (name, f)


def test_uses_in_the_package_are_listed(base):
    change = diff.Change("struct", STRUCT, "changed", True, {"fields_removed": ["flash_attn_type"]})
    diff.find_uses([change])
    assert any(u.startswith("llama_ffi/high/context.py:") for u in change.used_in)


def test_report_names_our_lines_for_what_python_can_notice(base):
    """A field that only moved needs no change of ours (the compiler lays the struct out): its uses
    are not listed. An added, removed or retyped one is, one line a file, every line number."""
    moved = diff.Change("struct", STRUCT, "changed", True, {"fields_moved": [{"field": "n_ctx", "old": 0, "new": 4}]})
    added = diff.Change("struct", STRUCT, "changed", True, {"fields_added": ["n_ctx"]})
    diff.find_uses([moved, added])
    uses_of_n_ctx = [u for u, by in zip(added.used_in, added.used_by) if by.startswith("`n_ctx`")]
    assert len(uses_of_n_ctx) > 5 and not any(u in moved.used_in for u in uses_of_n_ctx)
    report = diff.markdown([added], "old", "new")
    files = {u.rpartition(":")[0] for u in added.used_in}
    for path in files:
        lines = [
            f"{u.rpartition(':')[2]} ({by})"
            for u, by in zip(added.used_in, added.used_by)
            if u.rpartition(":")[0] == path
        ]
        assert f"    - `{path}`: {', '.join(lines)}" in report.splitlines()


def test_each_listed_line_names_the_symbol_and_the_code_it_sits_in(base):
    """Line numbers move with every commit: each use also says which name it mentions and in which
    def or class, and those are what the line holds."""
    change = diff.Change("constant", "RPC_PROTO_MAJOR_VERSION", "changed", True)
    diff.find_uses([change])
    assert len(change.used_by) == len(change.used_in) > 0
    for use, by in zip(change.used_in, change.used_by):
        path, _, line = use.rpartition(":")
        lines = (diff.PACKAGE.parent / path).read_text().splitlines()
        name, where = re.fullmatch(r"`(\w+)` in `([\w.]+)`", by).groups()
        assert name in lines[int(line) - 1]
        if where != "module":  # the innermost def or class named is above the line
            assert any(re.match(rf"\s*(async\s+)?(def|class) {where.split('.')[-1]}\b", x) for x in lines[: int(line)])
    assert any("check_protocol" in by for by in change.used_by)


def test_cli_exit_status_and_report(tmp_path, base):
    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    snapshot.write(base[1], old)
    changed = json.loads(json.dumps(base[1]))
    changed["functions"].pop("llama_decode")
    changed["functions"]["llama_ffi_new"] = {"header": "llama.h", "signature": "int llama_ffi_new(void)"}
    snapshot.write(changed, new)
    run = [
        sys.executable,
        "-m",
        "tools.abi.diff",
        str(old),
        str(new),
        "--markdown",
        str(tmp_path / "r.md"),
        "--json",
        str(tmp_path / "r.json"),
    ]
    assert subprocess.run(run, cwd=REPO).returncode == 1
    assert subprocess.run(run + ["--accept-breaking"], cwd=REPO).returncode == 0
    report = (tmp_path / "r.md").read_text()
    assert "**function `llama_decode` removed**" in report and "`llama_ffi_new` added" in report
    assert "llama_ffi/high/" in report  # llama_decode's uses are named


def test_bad_inputs_name_the_file(tmp_path, tree):
    from tools.vendor import VendorError

    with pytest.raises(VendorError, match="not a llama.cpp tree"):
        snapshot.load_or_take(str(tmp_path))
    root = copy_headers(tree, tmp_path / "broken")
    insert_before_closing(root / LLAMA_H, "LLAMA_API int broken(;")
    from tools.gen import GenerationError

    with pytest.raises(GenerationError, match="llama.h"):
        snapshot.take(root)
    out = tmp_path / "snap.json"
    assert (
        subprocess.run(
            [sys.executable, "-m", "tools.abi.snapshot", str(root), "-o", str(out)], cwd=REPO, capture_output=True
        ).returncode
        == 1
    )
    assert not out.exists()  # never a partial snapshot


def test_probe_compile_failure_is_reported(tree, tmp_path):
    root = copy_headers(tree, tmp_path / "probe")
    # valid to the generator (pycparser), but the compiler rejects the incomplete field type
    _edit_lines(
        root / LLAMA_H,
        lambda ls: ls.insert(
            struct_body((root / LLAMA_H).read_text(), "llama_context_params")[0], "        struct llama_nope x;\n"
        ),
    )
    with pytest.raises(snapshot.SnapshotError, match="failed to compile"):
        snapshot.take(root)


def test_guard_refuses_another_build():
    from llama_ffi import _guard

    _guard.check_libraries()  # the real build passes
    with pytest.raises(ImportError, match="another llama.cpp build"):
        _guard.check_libraries(expected_id="build-id:" + "0" * 40)  # a faked build record
    with pytest.raises(ImportError, match="another llama.cpp build"):
        _guard.check_libraries(expected_id="sha256:" + "0" * 64)
    if _guard.loaded_commit() != "unknown":
        with pytest.raises(ImportError, match="another llama.cpp build"):
            _guard.check_libraries(expected="deadbeefcafe0000")
    assert _guard.same_commit("0c1e57098bba43ac", "0c1e570")
    assert not _guard.same_commit("0c1e57098bba43ac", "1234567")
    assert not _guard.same_commit("0c1e57098bba43ac", "unknown")


def test_guard_refuses_a_libllama_from_another_build_on_the_library_path(tmp_path):
    """Another libllama first on LD_LIBRARY_PATH: a copy of ours with another build ID (it loads
    and runs like the original, but the linker would give another build another ID)."""
    import os
    import shutil

    import llama_ffi
    from tools.gen.symbols import gnu_build_id

    for lib_file in (Path(llama_ffi.__file__).parent / "lib").glob("*.so"):
        shutil.copy(lib_file, tmp_path / lib_file.name)
    copy = tmp_path / "libllama.so"
    ours = bytes.fromhex(gnu_build_id(copy))
    assert ours and copy.read_bytes().count(ours) == 1
    copy.write_bytes(copy.read_bytes().replace(ours, bytes(b ^ 0xFF for b in ours)))
    assert gnu_build_id(copy) != ours.hex()
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", "import llama_ffi"], cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert "LibraryMismatchError" in run.stderr and str(tmp_path / "libllama.so") in run.stderr
    ok = subprocess.run([sys.executable, "-c", "import llama_ffi"], cwd=REPO, capture_output=True)
    assert ok.returncode == 0
