"""Bump llama.cpp in one command: fetch → snapshot → diff → report → pin → cdefs → build → tests.

    python -m tools.abi.bump xllamacpp==2026.10.11549 --inner-path thirdparty/llama.cpp \\
        --sha256 <archive sha256> --build-number 11549 [--commit HASH] [--accept-breaking]
    python -m tools.abi.bump --tree /path/to/llama.cpp [--accept-breaking]

The candidate tree is materialised beside the current one and compared with the committed
snapshot (``headers/abi.json``). The report goes to ``vendor/abi-report.md`` (and ``.json``) and
its summary to ``vendor/CHANGELOG.md``. With breaking changes the bump stops there unless
``--accept-breaking`` (after reviewing the uses the report lists). Then the pin, the tree, the
generated cdefs, the snapshot and the coverage are replaced (each file atomically), the package
is rebuilt in place and the test suite runs. With ``--tree`` the pin stays; the build and tests
use the tree through ``LLAMA_CPP_DIR``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tools.abi import diff, snapshot
from tools.vendor import (
    DEFAULT_TREE,
    REPO_ROOT,
    TREE_ENV,
    UNKNOWN_COMMIT,
    Pin,
    VendorError,
    _git_describe,
    check_is_llama_tree,
    extract_tree,
    fetch_archive,
    tree_label,
    write_pin,
)

SNAPSHOT = REPO_ROOT / "headers" / "abi.json"
REPORT = REPO_ROOT / "vendor" / "abi-report.md"
CHANGELOG = REPO_ROOT / "vendor" / "CHANGELOG.md"
CANDIDATE = REPO_ROOT / "vendor" / ".llama.cpp-candidate"


def _parse_requirement(req: str) -> tuple[str, str]:
    name, sep, version = req.partition("==")
    if not sep or not name or not version:
        raise SystemExit(f"error: expected NAME==VERSION, got {req!r}")
    return name, version


def _summary(changes: list[diff.Change], old: str, new: str) -> str:
    breaking = [c for c in changes if c.breaking]
    lines = [
        f"## {old} → {new}",
        "",
        f"{len(breaking)} breaking, {len(changes) - len(breaking)} additive ABI changes "
        f"(full report: vendor/abi-report.md).",
        "",
    ]
    lines += [f"- {c.kind} `{c.symbol}` {c.change}: {diff._describe(c)}" for c in breaking[:40]]
    if len(breaking) > 40:
        lines.append(f"- … and {len(breaking) - 40} more")
    return "\n".join(lines) + "\n\n"


def _run(cmd: list[str], env: dict | None = None) -> int:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env).returncode


def bump(new_pin: Pin | None, tree: Path | None, accept_breaking: bool, run_tests: bool) -> int:
    import build_ffi
    from tools.gen import generate

    old = json.loads(SNAPSHOT.read_text())
    if new_pin is not None:
        archive = fetch_archive(new_pin)  # verifies the sha256
        extract_tree(archive, new_pin, CANDIDATE)  # and, with a git dir, the commit
        candidate, commit = CANDIDATE, tree_label(new_pin.commit, new_pin.build_number)
    else:
        check_is_llama_tree(tree)
        candidate, commit = tree, tree_label(*_git_describe(tree))
    new = snapshot.take(candidate, commit)
    changes = diff.compare(old, new)
    diff.find_uses(changes)
    old_name, new_name = old["commit"][:12], commit[:12]
    REPORT.write_text(diff.markdown(changes, old_name, new_name))
    REPORT.with_suffix(".json").write_text(json.dumps([dataclasses.asdict(c) for c in changes], indent=1))
    breaking = sum(c.breaking for c in changes)
    print(f"{breaking} breaking, {len(changes) - breaking} additive changes: see {REPORT}")
    if breaking and not accept_breaking:
        print("review the report, then rerun with --accept-breaking", file=sys.stderr)
        shutil.rmtree(CANDIDATE, ignore_errors=True)
        return 1

    env = dict(os.environ)
    if new_pin is not None:
        write_pin(new_pin)
        if DEFAULT_TREE.exists():
            shutil.rmtree(DEFAULT_TREE)
        os.replace(CANDIDATE, DEFAULT_TREE)
        candidate = DEFAULT_TREE
    else:
        env[TREE_ENV] = str(tree)
    bindings = generate(candidate, commit)
    build_ffi.write_headers(bindings)
    snapshot.write(new, SNAPSHOT)
    with open(CHANGELOG, "a") as f:
        f.write(_summary(changes, old_name, new_name))
    if _run([sys.executable, "setup.py", "build_ext", "--inplace"], env) != 0:
        print("the rebuild failed: see its output", file=sys.stderr)
        return 1
    if _run([sys.executable, "build_ffi.py", "--coverage"], env) != 0:
        return 1
    if run_tests and _run([sys.executable, "-m", "pytest", "-q", "tests"], env) != 0:
        print("the test suite fails on the new llama.cpp: fix the uses the report lists", file=sys.stderr)
        return 1
    print(f"bumped llama.cpp {old_name} → {new_name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("requirement", nargs="?", help="registry source NAME==VERSION")
    ap.add_argument("--tree", type=Path, help="a local llama.cpp tree instead")
    ap.add_argument("--inner-path", default="llama.cpp", help="the tree's folder inside the archive")
    ap.add_argument("--git-dir", help="its git directory inside the archive, when shipped")
    ap.add_argument("--sha256", help="the archive's sha256 (required for a registry source)")
    ap.add_argument("--commit", help="the llama.cpp commit of the archive's tree, when known")
    ap.add_argument("--build-number", type=int, help="llama.cpp's build number (bNNNN)")
    ap.add_argument("--accept-breaking", action="store_true")
    ap.add_argument("--no-tests", action="store_true")
    args = ap.parse_args(argv)
    if bool(args.requirement) == bool(args.tree):
        ap.error("give either NAME==VERSION or --tree")
    pin = None
    if args.requirement:
        if not (args.sha256 and args.build_number is not None):
            ap.error("a registry source needs --sha256 and --build-number (and --commit when known)")
        name, version = _parse_requirement(args.requirement)
        pin = Pin(
            package=name,
            version=version,
            sha256=args.sha256.lower(),
            inner_path=args.inner_path,
            commit=args.commit or UNKNOWN_COMMIT,
            build_number=args.build_number,
            git_dir=args.git_dir,
        )
    try:
        return bump(pin, args.tree.resolve() if args.tree else None, args.accept_breaking, not args.no_tests)
    except (VendorError, snapshot.SnapshotError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        shutil.rmtree(CANDIDATE, ignore_errors=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
