"""Run llama-cpp-python's own test suites against llama-ffi (maintainers' measure of the drop-in).

    python -m tools.peer_suites PATH/TO/llama-cpp-python/tests [pytest args...]

The suite runs unchanged from a scratch copy: a ``conftest.py`` written beside it lends llama-ffi
the ``llama_cpp`` name (``install_as_llama_cpp``) and answers ``huggingface_hub.hf_hub_download``
with local stand-ins (SmolLM2 for the chat and text models, the MiniLM embedder the test suite
builds, a tiny Mamba for the recurrent model); a model with no stand-in skips its test. Run it from
the repository root: the suites read llama.cpp's vocabulary files under ``vendor/llama.cpp/models``.
The suites are fetched by hand and never committed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CONFTEST = """
import sys
from pathlib import Path

import llama_ffi

assert llama_ffi.install_as_llama_cpp(), "a real llama-cpp-python is installed"
REPO = Path({repo!r})
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "vendor" / "llama.cpp" / "gguf-py"))
import huggingface_hub  # noqa: E402

from llama_ffi import registry  # noqa: E402


def _smollm2():
    return str(registry.fetch(registry.SMOLLM2))


def _embedder():
    import minilm
    from tools.vendor import materialise

    return str(minilm.gguf_path(materialise()))


def _mamba():
    from tiny_mamba import write_gguf

    path = Path({scratch!r}) / "tiny-mamba.gguf"
    return str(path if path.exists() else write_gguf(path))


STAND_INS = {{
    "Qwen3.5-0.8B-Q8_0.gguf": _smollm2,
    "qwen2.5-0.5b-instruct-q4_k_m.gguf": _smollm2,
    "tinyllamas/stories15M-q4_0.gguf": _smollm2,
    "bge-small-en-v1.5-q4_k_m.gguf": _embedder,
    "mamba-130m-hf.Q2_K.gguf": _mamba,
}}


def hf_hub_download(repo_id, filename, *args, **kwargs):
    if filename not in STAND_INS:
        import pytest

        pytest.skip(f"no local stand-in for {{repo_id}}/{{filename}}")
    return STAND_INS[filename]()


huggingface_hub.hf_hub_download = hf_hub_download
"""


def main(argv: list[str]) -> int:
    if not argv or not Path(argv[0]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="llama-ffi-peer-"))
    try:
        suite = scratch / "tests"
        shutil.copytree(argv[0], suite)
        (scratch / "conftest.py").write_text(CONFTEST.format(repo=str(REPO), scratch=str(scratch)))
        (scratch / "pytest.ini").write_text("[pytest]\n")
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(scratch)]
        command += ["-c", str(scratch / "pytest.ini"), str(suite), *argv[1:]]
        return subprocess.call(command, cwd=REPO)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
