"""The models ``-hf`` keeps in the Hugging Face hub cache, as the router sees them: listed (one per
repository and quantisation tag, as llama-server lists them), downloaded (``POST /models``) and
removed (``DELETE /models``)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from llama_ffi.high.errors import RequestValueError
from llama_ffi.server.router.catalog import DRAFT_PREFIXES, ModelEntry

# llama.cpp's reading of a GGUF file name (common/download.cpp): an optional -NNNNN-of-NNNNN split
# suffix, then the quantisation tag after the last - or . (Q4_K_M, F16...).
SPLIT = re.compile(r"^(.+)-(\d{5})-of-(\d{5})$", re.IGNORECASE)
TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
COMPANIONS = ("mmproj", "eagle3-", *DRAFT_PREFIXES)  # anywhere in the name, as download.cpp looks
SPEC = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*(:[A-Za-z0-9_]+)?")


def cache_dir() -> Path:
    """The hub cache ``-hf`` downloads into (huggingface_hub's rule, as llama.cpp's)."""
    for name, below in (("HF_HUB_CACHE", ""), ("HUGGINGFACE_HUB_CACHE", ""), ("HF_HOME", "hub")):
        if os.environ.get(name):
            return Path(os.environ[name]) / below
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "huggingface" / "hub"


def quant_tag(file_name: str) -> str | None:
    """The quantisation tag of a model's first (or only) file; None for any other file."""
    if not file_name.lower().endswith(".gguf"):
        return None
    stem = file_name[: -len(".gguf")]
    split = SPLIT.match(stem)
    if split is not None:
        if int(split[2]) != 1:
            return None
        stem = split[1]
    if any(c in stem for c in COMPANIONS):
        return None
    tag = TAG.search(stem)
    return tag[1].upper() if tag else None


def _repo_dir(root: Path, repo_id: str) -> Path:
    return root / ("models--" + repo_id.replace("/", "--"))


def entries(cache: Path | None = None) -> list[ModelEntry]:
    """Every model ``-hf OWNER/NAME:TAG`` has downloaded, loaded again with ``-hf`` (from the
    cache, offline first)."""
    root = cache_dir() if cache is None else cache
    found: dict[str, ModelEntry] = {}
    for repo in sorted(root.glob("models--*")) if root.is_dir() else ():
        repo_id = repo.name[len("models--") :].replace("--", "/")
        for path in sorted((repo / "snapshots").glob("*/**/*.gguf")):
            tag = quant_tag(path.name)
            spec = f"{repo_id}:{tag}"
            if tag is not None and spec not in found:
                found[spec] = ModelEntry(spec, ("-hf", spec), "cache")
    return list(found.values())


def check_spec(spec: object) -> str:
    """``OWNER/NAME[:TAG]`` or a ``RequestValueError`` saying what is wrong with it."""
    if not isinstance(spec, str) or not SPEC.fullmatch(spec):
        raise RequestValueError(f"model must be 'owner/name' or 'owner/name:TAG', got {spec!r}")
    return spec


def listed_id(spec: object) -> str:
    """The id the router lists ``OWNER/NAME[:TAG]`` by once downloaded (the tag -hf defaults to);
    a ``ValueError`` saying what is wrong with a spec that names no model."""
    from llama_ffi.high.hub import DEFAULT_QUANT

    repo_id, _, tag = check_spec(spec).partition(":")
    return f"{repo_id}:{(tag or DEFAULT_QUANT).upper()}"


def download(spec: str) -> Path:
    """Fetch ``spec`` as ``-hf`` would (what the cache holds is not fetched again)."""
    from llama_ffi.high import hub

    return hub.cli_model(check_spec(spec))


def remove(spec: str, cache: Path | None = None) -> bool:
    """Delete the files of ``OWNER/NAME:TAG`` (every part of a split model) and their blobs; the
    repository goes whole once no model of it is left. False when nothing was cached."""
    repo_id, _, tag = check_spec(spec).partition(":")
    repo = _repo_dir(cache_dir() if cache is None else cache, repo_id)
    snapshots = repo / "snapshots"
    removed = False
    for path in sorted(snapshots.glob("*/**/*.gguf")) if snapshots.is_dir() else ():
        if quant_tag(_first_part(path.name)) != tag.upper():  # every part of a split model: by its first
            continue
        blob = path.resolve() if path.is_symlink() else None
        path.unlink()
        if blob is not None and repo in blob.parents and blob.exists():
            blob.unlink()
        removed = True
    if removed and not any(quant_tag(p.name) for p in snapshots.glob("*/**/*.gguf")):
        shutil.rmtree(repo, ignore_errors=True)
    return removed


def _first_part(name: str) -> str:
    split = SPLIT.match(name[: -len(".gguf")]) if name.lower().endswith(".gguf") else None
    return f"{split[1]}-00001-of-{split[3]}.gguf" if split else name
