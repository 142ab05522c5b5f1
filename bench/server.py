"""The benchmark's server table: N concurrent HTTP clients (1-16), each one ``/v1/completions`` of
``N_PROMPT`` prompt tokens and ``N_GEN`` greedy tokens (``ignore_eos``), against ``llama-server -np
N`` from the pinned tree on the same requests, and against the same requests as asyncio tasks on an
in-process ``Llama`` (what the server runs, without HTTP).
Both servers get the same context, batch sizes and threads, one pool of KV cells, 127.0.0.1 and
a free port, and keep their prompt caches (llama-server's default); wall time from the first
request to the last answer, a median of ``repeats``."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.common import batched_llama, eog_ban, median
from bench.concurrent import CALLERS, N_GEN, HttpServer, in_asyncio, prompts, run_threads


def bench(model: str, threads: int, repeats: int, tools: Path | None) -> list[dict]:
    """Count by count: the in-process engine (a Llama with N slots, as the servers have), then both
    servers up at once and timed in turns (llama-server, then ours, ``repeats`` times), so that
    both see the same machine speed; an idle server takes no CPU."""
    native = tools / "llama-server" if tools and (tools / "llama-server").is_file() else None
    commands = {"ffi_s": [sys.executable, "-m", "llama_ffi.server", "-kvu"]}  # both: one pool of cells
    if native:
        commands = {"native_s": [str(native), "--no-webui", "-kvu"], **commands}
    rows = []
    for n in CALLERS:
        with batched_llama(model, threads, n) as llm:
            ban, n_vocab = eog_ban(llm), llm.n_vocab()
            in_asyncio(llm, n, ban)  # warm-up
            row = {
                "clients": n,
                "native_s": float("nan"),
                "in_process_s": median([in_asyncio(llm, n, ban) for _ in range(repeats)]),
            }
        servers = {}
        try:
            for key, command in commands.items():
                servers[key] = HttpServer(command, model, threads, n)
                servers[key].complete(prompts(n_vocab, 1)[0])  # warm-up
            times: dict[str, list[float]] = {key: [] for key in servers}
            for _ in range(repeats):
                for key, server in servers.items():
                    times[key].append(run_threads([lambda p=p, s=server: s.complete(p) for p in prompts(n_vocab, n)]))
            row.update({key: median(t) for key, t in times.items()})
        finally:
            for server in servers.values():
                server.close()
        rows.append(row)
    return rows


def server_table(rows: list[dict]) -> str:
    out = [
        "| clients | llama-server s | llama-ffi serve s | in-process engine s | llama-server / llama-ffi serve |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['clients']} | {r['native_s']:.2f} | {r['ffi_s']:.2f} | {r['in_process_s']:.2f} | "
            f"{r['native_s'] / r['ffi_s']:.2f} |"
        )
    one = next(r for r in rows if r["clients"] == 1)
    out += [
        "",
        f"HTTP layer at 1 client: {1000 * (one['ffi_s'] - one['in_process_s']):.1f} ms per request "
        f"({1000 * (one['ffi_s'] - one['in_process_s']) / N_GEN:.3f} ms per token)",
    ]
    return "\n".join(out)
