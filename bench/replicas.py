"""The benchmark's replicas table: what the Ray layer costs. One server without Ray, all threads and
slots (``llama-ffi serve``), against one Ray Serve replica of the same (``--replicas 1``: the layer
alone), and the machine's threads as two replicas of half the threads and half the slots each
(``--replicas 2``; the same behind the prefix ingress, ``--affinity prefix``, its extra hop), under N
concurrent HTTP clients sending
the server table's requests (``N_GEN`` greedy tokens each); wall time from the first request to the
last answer, a median of ``repeats``. One Ray cluster at a time: each setup starts its own."""

from __future__ import annotations

import sys

from bench.common import median
from bench.concurrent import HttpServer, prompts, run_threads

CLIENTS = (4, 8)


def _time(command: list[str], model: str, threads: int, slots: int, n: int, repeats: int) -> float:
    server = HttpServer(command, model, threads, slots)
    try:
        requests = prompts(32000, n)  # token ids below every small model's vocabulary
        server.complete(requests[0])  # warm-up (and both replicas loaded)
        return median([run_threads([lambda p=p: server.complete(p) for p in requests]) for _ in range(repeats)])
    finally:
        server.close()


def bench(model: str, threads: int, repeats: int) -> list[dict]:
    plain = [sys.executable, "-m", "llama_ffi.server"]
    serve = [*plain, "--ray", "--replicas"]
    half = max(1, threads // 2)
    rows = []
    for n in CLIENTS:
        alone = _time(plain, model, threads, n, n, repeats)
        one = _time([*serve, "1"], model, threads, n, n, repeats)
        two = _time([*serve, "2"], model, half, max(1, n // 2), n, repeats)
        prefix = _time([*serve, "2", "--affinity", "prefix"], model, half, max(1, n // 2), n, repeats)
        rows.append(
            {"clients": n, "plain_s": alone, "one_s": one, "two_s": two, "prefix_s": prefix, "threads": threads}
        )
    return rows


def replicas_table(rows: list[dict]) -> str:
    out = [
        "| clients | no Ray s | 1 replica s | Ray layer (no Ray ÷ 1 replica) | 2 replicas × half s | 2 ÷ 1 "
        "| 2 with --affinity prefix s | prefix ÷ 1 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        plain, one, two, prefix = r["plain_s"], r["one_s"], r["two_s"], r["prefix_s"]
        cells = [str(r["clients"]), f"{plain:.2f}", f"{one:.2f}", f"{plain / one:.2f} ×", f"{two:.2f}"]
        cells += [f"{one / two:.2f} ×", f"{prefix:.2f}", f"{one / prefix:.2f} ×"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)
