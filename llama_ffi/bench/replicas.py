"""The benchmark's replicas table: what the Ray layer costs. The machine's threads as two Ray Serve
replicas of half the threads and half the slots each (``llama-ffi serve --ray --replicas 2``)
against one replica with all of them (``--replicas 1``), and the two behind the prefix ingress
(``--affinity prefix``: its extra hop), under N concurrent HTTP clients sending
the server table's requests (``N_GEN`` greedy tokens each); wall time from the first request to the
last answer, a median of ``repeats``. One Ray cluster at a time: each setup starts its own."""

from __future__ import annotations

import sys

from llama_ffi.bench.common import _median
from llama_ffi.bench.concurrent import HttpServer, prompts, run_threads

CLIENTS = (4, 8)


def _time(command: list[str], model: str, threads: int, slots: int, n: int, repeats: int) -> float:
    server = HttpServer(command, model, threads, slots)
    try:
        requests = prompts(32000, n)  # token ids below every small model's vocabulary
        server.complete(requests[0])  # warm-up (and both replicas loaded)
        return _median([run_threads([lambda p=p: server.complete(p) for p in requests]) for _ in range(repeats)])
    finally:
        server.close()


def bench(model: str, threads: int, repeats: int) -> list[dict]:
    serve = [sys.executable, "-m", "llama_ffi.server", "--ray", "--replicas"]
    half = max(1, threads // 2)
    rows = []
    for n in CLIENTS:
        one = _time([*serve, "1"], model, threads, n, n, repeats)
        two = _time([*serve, "2"], model, half, max(1, n // 2), n, repeats)
        prefix = _time([*serve, "2", "--affinity", "prefix"], model, half, max(1, n // 2), n, repeats)
        rows.append({"clients": n, "one_s": one, "two_s": two, "prefix_s": prefix, "threads": threads, "half": half})
    return rows


def replicas_table(rows: list[dict]) -> str:
    out = [
        "| clients | 1 replica × all threads s | 2 replicas × half s | 2 ÷ 1 (throughput) "
        "| 2 with --affinity prefix s | prefix ÷ 1 |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        one, two, prefix = r["one_s"], r["two_s"], r["prefix_s"]
        cells = [str(r["clients"]), f"{one:.2f}", f"{two:.2f}", f"{one / two:.2f} ×", f"{prefix:.2f}"]
        out.append("| " + " | ".join([*cells, f"{one / prefix:.2f} ×"]) + " |")
    return "\n".join(out)
