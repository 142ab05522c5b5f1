"""Runs llama.cpp's own server tests (the pinned tree's ``tools/server/tests/unit``) against a server
through ``shim.py``, with local stand-ins for the models they would download, and returns the ids of
the tests that passed.

``python -m tests.conformance.run --reference`` records what the pinned llama-server passes
(``python -m tools.native_build --reference`` builds it) into ``llama_server_passes.txt``: the list
the conformance test holds ``llama-ffi serve`` to.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PASSES = HERE / "llama_server_passes.txt"
# The files the conformance test runs (the others need router mode, server-side tools, or
# downloads no stand-in replaces); a few minutes on 2 cores.
FILES = (
    "test_basic.py",
    "test_completion.py",
    "test_chat_completion.py",
    "test_tokenize.py",
    "test_embedding.py",
    "test_rerank.py",
    "test_security.py",
    "test_infill.py",
)


def standins() -> dict:
    """Hugging Face names the tests use -> [local model, projector]; "*" for any other."""
    from llama_ffi import registry

    sys.path.insert(0, str(ROOT / "tests"))
    import minilm
    from conftest import TREE

    smollm2 = str(registry.fetch(registry.SMOLLM2))
    return {
        "*": [smollm2, None],
        "ggml-org/models/bert-bge-small/ggml-model-f16.gguf": [str(minilm.gguf_path(TREE)), None],
        "ggml-org/models/jina-reranker-v1-tiny-en/ggml-model-f16.gguf": [str(minilm.rank_gguf_path(TREE)), None],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(target: str, work: Path, files=FILES, timeout: float = 1500) -> set[str]:
    """The passing test ids (``unit/test_x.py::name[params]``) of ``files`` against ``target``
    ("llama-ffi" or a llama-server binary)."""
    from conftest import TREE

    tests_dir = TREE.path / "tools" / "server" / "tests"
    work.mkdir(parents=True, exist_ok=True)
    launcher = work / "server"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "shim.py"}" "$@"\n')
    launcher.chmod(0o755)
    env = {
        **os.environ,
        "LLAMA_SERVER_BIN_PATH": str(launcher),
        "LLAMA_FFI_SHIM_TARGET": target,
        "LLAMA_FFI_STANDINS": json.dumps(standins()),
        "LLAMA_CACHE": str(work / "cache"),
        "PORT": str(free_port()),  # the tests' servers bind 127.0.0.1 on it (default 8080)
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-o", "addopts="]
    command += [f"unit/{f}" for f in files]
    done = subprocess.run(
        command, cwd=tests_dir, env=env, capture_output=True, text=True, timeout=timeout, start_new_session=True
    )
    (work / "log.txt").write_text(done.stdout + done.stderr)
    return set(re.findall(r"^PASSED (.+?)\s*$", done.stdout, flags=re.M))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reference", action="store_true", help="record what the pinned llama-server passes")
    parser.add_argument("--work", default=str(ROOT / "build" / "conformance"))
    parser.add_argument("--files", nargs="+", default=FILES, help="test files of the unit directory to run")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    if args.reference:
        binary = ROOT / "build" / "llama.cpp-reference" / "bin" / "llama-server"
        passed = run(str(binary), Path(args.work) / "reference", args.files)
        PASSES.write_text("".join(f"{t}\n" for t in sorted(passed)))  # one id per line (ids may hold spaces)
        print(f"llama-server passes {len(passed)}; written to {PASSES}")
    else:
        passed = run("llama-ffi", Path(args.work) / "ours", args.files)
        print(f"llama-ffi serve passes {len(passed)}")
        print("".join(f"{t}\n" for t in sorted(passed)), end="")


if __name__ == "__main__":
    main()
