"""Models from the Hugging Face Hub, offline first: ``Llama.from_pretrained(repo_id, filename)``.

``filename`` is a glob that must match exactly one file of the repository (llama-cpp-python's
rule). A split GGUF (``name-00001-of-00003.gguf``) brings its other parts; ``additional_files``
(globs too) brings more. What the local cache (or ``local_dir``) already holds is used without a
network call, and with ``HF_HUB_OFFLINE=1`` nothing else is tried. ``huggingface_hub`` is an
optional dependency: ``pip install 'llama-ffi[hf]'``.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from pathlib import Path

from llama_ffi.high.errors import RequestValueError

SPLIT_PART = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
DEFAULT_QUANT = "Q4_K_M"  # llama.cpp's -hf default tag


class HubError(RequestValueError):
    """The repository, the file or the cache cannot give what was asked for; the message says why."""


def _hub():
    try:
        import huggingface_hub
        import huggingface_hub.constants  # submodules the package loads lazily
        import huggingface_hub.errors
    except ImportError:
        raise ImportError("Llama.from_pretrained needs huggingface_hub: pip install 'llama-ffi[hf]'") from None
    return huggingface_hub


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def split_parts(path: str) -> list[str]:
    """Every part of a split GGUF named like ``path``, in order; ``[path]`` when it is whole."""
    m = SPLIT_PART.match(path)
    if m is None:
        return [path]
    count = int(m["count"])
    return [f"{m['stem']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def _match_one(files: Sequence[str], pattern: str, repo_id: str) -> str:
    # a split model counts once, as its first part, whichever of its parts the pattern matched
    models = sorted({split_parts(f)[0] for f in files if fnmatch.fnmatch(f, pattern)})
    if len(models) == 1:
        return models[0]
    if not models:
        raise HubError(f"no file in {repo_id} matches {pattern!r}; its files: {', '.join(sorted(files)) or 'none'}")
    raise HubError(
        f"{len(models)} files in {repo_id} match {pattern!r}: {', '.join(models)}; give a pattern that matches one"
    )


def _wanted(files: Sequence[str], repo_id: str, filename: str, additional_files: Sequence[str]) -> list[str]:
    """The repository paths to fetch: the model (all its parts) first, then the additional files."""
    wanted = split_parts(_match_one(files, filename, repo_id))
    for pattern in additional_files:
        for path in split_parts(_match_one(files, pattern, repo_id)):
            if path not in wanted:
                wanted.append(path)
    missing = [p for p in wanted if p not in files]
    if missing:
        raise HubError(f"{repo_id} lacks part(s) of a split model: {', '.join(missing)}")
    return wanted


def _cached_files(hub, repo_id: str, revision: str | None, cache_dir, local_dir) -> dict[str, Path]:
    """Repository path -> local file, for what ``local_dir`` or the cache holds of ``revision``."""
    if local_dir is not None:
        root = Path(local_dir)
        return {
            p.relative_to(root).as_posix(): p
            for p in root.rglob("*")
            if p.is_file() and ".cache" not in p.relative_to(root).parts
        }
    try:
        cache = hub.scan_cache_dir(cache_dir)
    except hub.CacheNotFound:
        return {}
    ref = revision or "main"
    for repo in cache.repos:
        if repo.repo_id != repo_id or repo.repo_type != "model":
            continue
        for rev in repo.revisions:
            if ref in rev.refs or rev.commit_hash.startswith(ref):
                return {f.file_path.relative_to(rev.snapshot_path).as_posix(): f.file_path for f in rev.files}
    return {}


def download(
    repo_id: str,
    filename: str,
    additional_files: Sequence[str] | None = None,
    local_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    revision: str | None = None,
) -> Path:
    """The local path of the model file (its first part when split), fetched if need be."""
    hub = _hub()
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise HubError(f"repo_id must be 'owner/name', got {repo_id!r}")
    extra = list(additional_files or [])
    cached = _cached_files(hub, repo_id, revision, cache_dir, local_dir)
    try:  # offline first: what is cached answers without the network
        return cached[_wanted(list(cached), repo_id, filename, extra)[0]]
    except HubError:
        if _offline():
            raise HubError(
                f"HF_HUB_OFFLINE is set and the cache does not hold {filename!r} of {repo_id} "
                f"(cached: {', '.join(sorted(cached)) or 'nothing'})"
            ) from None
    try:
        files = hub.list_repo_files(repo_id, revision=revision)
    except hub.errors.RepositoryNotFoundError:
        raise HubError(
            f"repository {repo_id} not found on {hub.constants.ENDPOINT} (or it is private: "
            "log in with `hf auth login`)"
        ) from None
    except hub.errors.RevisionNotFoundError:
        raise HubError(f"revision {revision!r} of {repo_id} not found") from None
    paths = [
        Path(hub.hf_hub_download(repo_id, path, revision=revision, cache_dir=cache_dir, local_dir=local_dir))
        for path in _wanted(files, repo_id, filename, extra)
    ]
    return paths[0]


def cli_model(spec: str, hf_file: str | None = None) -> Path:
    """llama.cpp's ``-hf OWNER/NAME[:QUANT]`` (and ``--hf-file FILE``): the GGUF whose name carries
    the quantisation tag, Q4_K_M unless told; a repository's only GGUF when it has no such file."""
    repo_id, _, tag = spec.partition(":")
    if hf_file:
        return download(repo_id, hf_file)
    try:
        return download(repo_id, f"*[-._]{tag or DEFAULT_QUANT}[-._]*gguf")
    except HubError:
        if tag:
            raise
        return download(repo_id, "*.gguf")


def from_pretrained(
    cls,
    repo_id: str,
    filename: str,
    additional_files: Sequence[str] | None = None,
    local_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    revision: str | None = None,
    **kwargs,
):
    """``Llama.from_pretrained``: ``cls`` loading ``filename`` of ``repo_id`` (``download``), with ``kwargs``."""
    return cls(download(repo_id, filename, additional_files, local_dir, cache_dir, revision), **kwargs)
