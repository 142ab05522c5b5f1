"""The benchmark's server table: N concurrent HTTP clients (1-16), each one ``/v1/completions`` of
``N_PROMPT`` prompt tokens and ``N_GEN`` greedy tokens (``ignore_eos``), against ``llama-server -np
N`` from the pinned tree on the same requests, and against the same callers in-process on our engine.
Both servers get the same context, batch sizes and threads, one pool of KV cells, 127.0.0.1 and
a free port; wall time from the first request to the last answer, a median of ``repeats``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from llama_ffi.bench.common import BATCHED_BATCH, BATCHED_CTX, BATCHED_UBATCH, _median, batched_llama, eog_ban
from llama_ffi.bench.concurrent import CALLERS, N_GEN, REQUEST_S, SERVER_START_S, ours, prompts, run_threads


class HttpServer:
    """A server process on 127.0.0.1 (llama-server, or ``llama-ffi serve``), stopped with SIGTERM."""

    def __init__(self, command: list[str], model: str, threads: int, n: int) -> None:
        from llama_ffi.rpc import free_port

        self.port = free_port()
        self.proc = subprocess.Popen(
            [*command, "-m", model, "-t", str(threads), "-c", str(BATCHED_CTX), "-b", str(BATCHED_BATCH),
             "-ub", str(BATCHED_UBATCH), "-np", str(n), "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.close()
        raise RuntimeError(f"{command[0]} did not start")

    def complete(self, prompt: list[int]) -> None:
        body = json.dumps({"prompt": prompt, "max_tokens": N_GEN, "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=REQUEST_S) as r:
            out = json.loads(r.read())
        if out["usage"]["completion_tokens"] != N_GEN:
            raise RuntimeError(f"expected {N_GEN} tokens, got {out['usage']}")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def timed(command: list[str], model: str, threads: int, n: int, n_vocab: int, repeats: int) -> float:
    server = HttpServer(command, model, threads, n)
    try:
        server.complete(prompts(n_vocab, 1)[0])  # warm-up
        return _median([run_threads([lambda p=p: server.complete(p) for p in prompts(n_vocab, n)])
                        for _ in range(repeats)])
    finally:
        server.close()


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
