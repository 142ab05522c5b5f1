"""The time between a streamed request's tokens, as the client receives them: one greedy
``/v1/completions`` stream of ``N_GEN`` tokens at a time, from ``llama-server`` (the pinned tree's)
and from ``llama-ffi serve``, one slot each, in alternating rounds so that both see the same
machine. Gaps from the second token on (the first follows the prompt): p50, p99 and the longest,
pooled over the rounds. A stream delivered in bursts shows a tiny p50 and a long p99."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bench.concurrent import HttpServer, prompts
from llama_ffi.high import Llama

N_GEN = 128


def gaps(arrived: list[float]) -> list[float]:
    return [b - a for a, b in zip(arrived[1:], arrived[2:])]


def bench(model: str, threads: int, repeats: int, native: Path | None) -> list[dict]:
    """Rows for llama-server (``native``, when given) and llama-ffi serve."""
    commands = {"llama-ffi serve": [sys.executable, "-m", "llama_ffi.server"]}
    if native:
        commands = {"llama-server": [str(native), "--no-webui"], **commands}
    servers = {}
    try:
        for name, command in commands.items():
            servers[name] = HttpServer(command, model, threads, 1)
        with Llama(model, vocab_only=True, progress=False) as vocab:
            prompt = prompts(vocab.n_vocab, 1)[0][:64]
        for server in servers.values():
            server.stream(prompt, 16)  # warm-up
        pooled: dict[str, list[float]] = {name: [] for name in servers}
        for _ in range(repeats):
            for name, server in servers.items():
                pooled[name] += gaps(server.stream(prompt, N_GEN))
    finally:
        for server in servers.values():
            server.close()
    return [row(name, np.asarray(seconds) * 1e3) for name, seconds in pooled.items()]


def row(server: str, ms: np.ndarray) -> dict:
    return {
        "server": server,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "longest_ms": float(ms.max()),
    }


def stream_latency_table(rows: list[dict]) -> str:
    lines = [
        f"| server | gap between streamed tokens p50 | p99 | longest | ({N_GEN} greedy tokens a stream) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['server']} | {r['p50_ms']:.2f} ms | {r['p99_ms']:.2f} ms | {r['longest_ms']:.2f} ms | |" for r in rows
    ]
    by_name = {r["server"]: r for r in rows}
    if len(by_name) == 2:
        ratio = by_name["llama-ffi serve"]["p99_ms"] / by_name["llama-server"]["p99_ms"]
        lines += ["", f"p99 llama-ffi serve / llama-server: {ratio:.2f}"]
    return "\n".join(lines)
