"""Runs llama.cpp's own server tests (the pinned tree's ``tools/server/tests/unit``) against a server
through ``shim.py``, with local stand-ins for the models they would download, and returns the ids of
the tests that passed.

``python -m tests.conformance.run --reference`` records what the pinned llama-server passes
(``python -m tools.native_build --reference`` builds it) into ``llama_server_passes.txt``: the list
the conformance test holds ``llama-ffi serve`` to.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PASSES = HERE / "llama_server_passes.txt"
# The files the default run's conformance test runs (about two minutes on 2 cores: embeddings, which
# tests/test_embedding.py and tests/test_server.py hold to llama.cpp's tools, run with the rest);
# ALL_FILES in the ``conformance``-marked test (about half an hour).
FILES = (
    "test_basic.py",
    "test_completion.py",
    "test_chat_completion.py",
    "test_tokenize.py",
    "test_rerank.py",
    "test_security.py",
)
# Every file.
ALL_FILES = tuple(
    sorted(p.name for p in (ROOT / "vendor" / "llama.cpp" / "tools" / "server" / "tests" / "unit").glob("test_*.py"))
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
        # router mode's models, by the ids the router tests name them (llama.cpp's cache would list them)
        "router": {
            "ggml-org/tinygemma3-GGUF:Q8_0": smollm2,
            "ggml-org/test-model-stories260K:F32": smollm2,
            "ggml-org/test-model-stories260K-infill:F32": smollm2,
        },
    }


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (each socket held until all are chosen)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def shares(files, jobs: int) -> list[list[str]]:
    """``files`` in ``jobs`` groups of about equal size (a file's size stands for its run time)."""
    tests_dir = unit_dir()
    groups: list[list[str]] = [[] for _ in range(max(1, min(jobs, len(files))))]
    weights = [0] * len(groups)
    for f in sorted(files, key=lambda f: -(tests_dir / f).stat().st_size):
        k = weights.index(min(weights))
        groups[k].append(f)
        weights[k] += (tests_dir / f).stat().st_size
    return groups


def unit_dir() -> Path:
    from conftest import TREE

    return TREE.path / "tools" / "server" / "tests" / "unit"


def run(
    target: str, work: Path, files=FILES, timeout: float = 1500, jobs: int = 2, only: set[str] | None = None
) -> set[str]:
    """The passing test ids (``unit/test_x.py::name[params]``) of ``files`` against ``target``
    ("llama-ffi" or a llama-server binary); ``only``: just these ids (``select.py``). ``jobs``
    pytest runs share the files, each with its own port and its servers' CPU threads (most of a
    test's time is a server starting and stopping: two overlap well on 2 cores)."""
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
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    if jobs > 1:  # servers side by side: one thread each (two that each spin two on 2 cores take 3x as long)
        env.setdefault("LLAMA_ARG_THREADS", str(max(1, (os.cpu_count() or 2) // jobs)))
    if only is not None:
        (work / "only.txt").write_text("".join(f"{t}\n" for t in sorted(only)))
        env["LLAMA_FFI_CONFORMANCE_ONLY"] = str(work / "only.txt")
    groups = shares(files, jobs)
    runs = []
    for group, port in zip(groups, free_ports(len(groups))):
        command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-o", "addopts="]
        command += ["-p", "tests.conformance.select"]
        command += [f"unit/{f}" for f in group]
        runs.append(
            subprocess.Popen(
                command,
                cwd=unit_dir().parent,
                env={**env, "PORT": str(port)},  # the tests' servers bind 127.0.0.1 on it (default 8080)
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + timeout
    logs = []
    for proc in runs:
        try:
            logs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the run and the servers it started
            logs.append(proc.communicate()[0] + "\n(timed out)")
    (work / "log.txt").write_text("\n".join(logs))
    return {t for log in logs for t in re.findall(r"^PASSED (.+?)\s*$", log, flags=re.M)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reference", action="store_true", help="record what the pinned llama-server passes")
    parser.add_argument("--work", default=str(ROOT / "build" / "conformance"))
    parser.add_argument("--files", nargs="+", default=FILES, help="test files of the unit directory to run")
    parser.add_argument("--jobs", type=int, default=2, help="pytest runs at once (1 for llama-server's generation)")
    parser.add_argument("--timeout", type=float, default=1500, help="seconds before the runs are stopped")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    if args.reference:
        binary = ROOT / "build" / "llama.cpp-reference" / "bin" / "llama-server"
        passed = run(str(binary), Path(args.work) / "reference", args.files, args.timeout, args.jobs)
        PASSES.write_text("".join(f"{t}\n" for t in sorted(passed)))  # one id per line (ids may hold spaces)
        print(f"llama-server passes {len(passed)}; written to {PASSES}")
    else:
        passed = run("llama-ffi", Path(args.work) / "ours", args.files, args.timeout, args.jobs)
        print(f"llama-ffi serve passes {len(passed)}")
        print("".join(f"{t}\n" for t in sorted(passed)), end="")


if __name__ == "__main__":
    main()
