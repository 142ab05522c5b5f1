"""The benchmark's RPC table: the same model decoded locally and through two ``llama-ffi
rpc-server`` workers on this machine (all layers on the workers, split in halves), so the
difference is the transport's cost. ``llama-bench --rpc`` through the same workers shows what
llama.cpp's own client pays without llama-ffi's relay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.common import N_GEN, N_PROMPT, ffi_generation_test, ffi_prompt_test, median, native_test
from llama_ffi import rpc


def start_workers(n: int, threads: int) -> list[tuple[subprocess.Popen, str]]:
    workers = []
    for _ in range(n):
        port = rpc.free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_ffi", "rpc-server", "-p", str(port), "-t", str(threads)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        workers.append((proc, f"127.0.0.1:{port}"))
    for proc, endpoint in workers:
        rpc.wait_until_serving(endpoint, proc)
    return workers


def bench(model: str, threads: int, repeats: int, llama_bench: Path | None) -> list[dict]:
    workers = start_workers(2, threads)
    servers = [endpoint for _, endpoint in workers]
    remote = {"rpc_servers": servers, "n_gpu_layers": 99}
    runs: dict[str, dict[str, list[float]]] = {k: {"pp": [], "tg": []} for k in ("local", "rpc", "native")}
    try:
        for _ in range(repeats):
            for key, options in (("local", {}), ("rpc", remote)):
                runs[key]["pp"].append(ffi_prompt_test(model, threads, N_PROMPT, **options)[2])
                runs[key]["tg"].append(ffi_generation_test(model, threads, **options)[0])
            if llama_bench:
                extra = ("--rpc", ",".join(servers), "-ngl", "99")
                runs["native"]["pp"].append(native_test(llama_bench, model, threads, N_PROMPT, 0, *extra))
                runs["native"]["tg"].append(native_test(llama_bench, model, threads, 0, N_GEN, *extra))
    finally:
        for proc, _ in workers:
            proc.terminate()  # SIGTERM: stops a worker whatever SIGINT disposition it inherited
            proc.wait(timeout=30)
    names = {
        "local": "llama-ffi, local CPU",
        "rpc": "llama-ffi, 2 rpc-server workers",
        "native": "llama-bench --rpc, same 2 workers",
    }
    rows = []
    for key, r in runs.items():
        if r["tg"]:
            rows.append(
                {
                    "name": names[key],
                    "pp": median(r["pp"]),
                    "tg": median(r["tg"]),
                    "tg_vs_local": median([t / here for t, here in zip(r["tg"], runs["local"]["tg"])]),
                }
            )
    return rows


def rpc_table(rows: list[dict]) -> str:
    out = [f"| path | prompt t/s ({N_PROMPT}) | gen t/s ({N_GEN}) | gen vs local |", "|---|---:|---:|---:|"]
    out += [f"| {r['name']} | {r['pp']:.1f} | {r['tg']:.1f} | {r['tg_vs_local']:.3f} |" for r in rows]
    return "\n".join(out)
