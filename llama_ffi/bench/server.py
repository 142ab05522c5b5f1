"""The benchmark's server table: N concurrent HTTP clients (1-16), each one ``/v1/completions`` of
``N_PROMPT`` prompt tokens and ``N_GEN`` greedy tokens (``ignore_eos``), against ``llama-server -np
N`` from the pinned tree on the same requests, and against the same callers in-process on our engine.
Both servers get the same context, batch sizes and threads, one pool of KV cells, 127.0.0.1 and
a free port; wall time from the first request to the last answer, a median of ``repeats``."""

from __future__ import annotations

import sys
from pathlib import Path

from llama_ffi.bench.common import _median, batched_llama, eog_ban
from llama_ffi.bench.concurrent import CALLERS, N_GEN, HttpServer, ours, timed_server


def timed(command: list[str], model: str, threads: int, n: int, n_vocab: int, repeats: int) -> float:
    return timed_server(HttpServer(command, model, threads, n), n_vocab, n, repeats)


def bench(model: str, threads: int, repeats: int, tools: Path | None) -> list[dict]:
    native = tools / "llama-server" if tools and (tools / "llama-server").is_file() else None
    ffi = [sys.executable, "-m", "llama_ffi.server"]
    rows = []
    with batched_llama(model, threads, max(CALLERS)) as llm:
        ban, n_vocab = eog_ban(llm), llm.n_vocab()
        ours(llm, 2, ban)  # warm-up
        in_process = {n: _median([ours(llm, n, ban) for _ in range(repeats)]) for n in CALLERS}
    for n in CALLERS:  # each server alone on the machine, llama-server first
        rows.append({"clients": n,
                     "native_s": timed([str(native), "--no-webui", "-kvu"], model, threads, n, n_vocab, repeats)
                     if native else float("nan"),
                     "ffi_s": timed(ffi, model, threads, n, n_vocab, repeats), "in_process_s": in_process[n]})
    return rows


def server_table(rows: list[dict]) -> str:
    out = ["| clients | llama-server s | llama-ffi serve s | in-process engine s | llama-server / llama-ffi serve |",
           "|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['clients']} | {r['native_s']:.2f} | {r['ffi_s']:.2f} | {r['in_process_s']:.2f} | "
                   f"{r['native_s'] / r['ffi_s']:.2f} |")
    one = next(r for r in rows if r["clients"] == 1)
    out += ["", f"HTTP layer at 1 client: {1000 * (one['ffi_s'] - one['in_process_s']):.1f} ms per request "
                f"({1000 * (one['ffi_s'] - one['in_process_s']) / N_GEN:.3f} ms per token)"]
    return "\n".join(out)
