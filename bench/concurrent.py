"""The benchmark's concurrent table: N callers on threads, each one completion of ``N_PROMPT``
prompt tokens and ``N_GEN`` greedy tokens (end-of-generation banned), on one ``Llama``, against
llama.cpp's ``llama-batched-bench -npp N_PROMPT -ntg N_GEN -npl N`` (its total time) and against
``llama-server -np N`` from the pinned tree with N concurrent loopback HTTP clients (what users
would run instead). Wall time from the first call to the last answer; each figure is a median.
A second line times a short request that arrives while a long one runs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench.common import (
    BATCHED_BATCH,
    BATCHED_CTX,
    BATCHED_UBATCH,
    batched_bench_row,
    batched_llama,
    eog_ban,
    median,
    paired_runs,
)

CALLERS = (1, 2, 4, 8, 16)
N_PROMPT, N_GEN = 32, 64
SERVER_START_S, REQUEST_S = 120.0, 300.0  # bounds: a stuck server fails the table, not the machine


def prompts(n_vocab: int, n: int) -> list[list[int]]:
    return [[(i * 7919 + 131 * s + 17) % n_vocab for i in range(N_PROMPT)] for s in range(n)]


def run_threads(fns) -> float:
    """Wall seconds until every one of ``fns`` has returned, all started at once."""
    errors: list[BaseException] = []

    def call(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(fn,), daemon=True) for fn in fns]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(REQUEST_S)
    wall = time.perf_counter() - t0
    if errors or any(t.is_alive() for t in threads):
        raise RuntimeError(f"a caller failed: {errors[:1] or 'timed out'}")
    return wall


def ours(llm, n: int, ban: dict) -> float:
    llm.reset()
    return run_threads(
        [lambda p=p: llm(p, max_tokens=N_GEN, temperature=0.0, logit_bias=ban) for p in prompts(llm.n_vocab(), n)]
    )


def in_asyncio(llm, n: int, ban: dict) -> float:
    """The same requests as ``n`` asyncio tasks of one event loop (the server's way in), wall
    seconds; the slots keep their caches between runs, as the servers' do."""

    async def all_of() -> None:
        await asyncio.gather(
            *(
                llm.acreate_completion(p, max_tokens=N_GEN, temperature=0.0, logit_bias=ban)
                for p in prompts(llm.n_vocab(), n)
            )
        )

    started = time.perf_counter()
    asyncio.run(all_of())
    return time.perf_counter() - started


def ours_asyncio(llm, n: int, ban: dict) -> float:
    """``in_asyncio`` from an empty cache, as ``ours`` runs the threads."""
    llm.reset()
    return in_asyncio(llm, n, ban)


def start_server(argv: list[str], port: int, seconds: float) -> subprocess.Popen:
    """Start the server ``argv`` (listening on 127.0.0.1:``port``) and wait until it is healthy; if it
    exits or stays unhealthy, stop it and raise with the end of its log."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        if healthy_within(port, seconds, proc):
            return proc  # the child keeps writing to the (unlinked) file: nobody waits on a pipe
        proc.terminate()
        proc.wait(60)
        log.seek(0)
        tail = log.read().decode(errors="replace")[-1500:]
    raise RuntimeError(f"{' '.join(argv[:3])} did not start (exit status {proc.returncode}):\n{tail}")


def batched_bench(binary: Path, model: str, threads: int, n: int) -> float:
    """llama-batched-bench's total time for ``n`` sequences."""
    return float(batched_bench_row(binary, model, threads, N_PROMPT, N_GEN, n, REQUEST_S)["t"])


def healthy_within(port: int, seconds: float, proc: subprocess.Popen | None = None) -> bool:
    """Whether the server on 127.0.0.1:``port`` answers ``/health`` with 200 within ``seconds``
    (False as soon as its process ``proc`` has exited)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.2)
    return False


class HttpServer:
    """A server process on 127.0.0.1 (llama-server, or ``llama-ffi serve``) with ``n`` slots and the
    batched tables' context and batch sizes, answering ``/v1/completions`` of ``N_GEN`` greedy
    tokens (``ignore_eos``, plus ``extra`` body fields); stopped with SIGTERM."""

    def __init__(self, command: list[str], model: str | None, threads: int, n: int, extra: dict | None = None) -> None:
        """``model`` None: ``command`` names the models (router mode's ``--models-preset``)."""
        from llama_ffi.rpc import free_port

        self.port, self.extra = free_port(), dict(extra or {})
        self.proc = start_server(
            [
                *command,
                *(("-m", model) if model is not None else ()),
                "-t",
                str(threads),
                "-c",
                str(BATCHED_CTX),
                "-b",
                str(BATCHED_BATCH),
                "-ub",
                str(BATCHED_UBATCH),
                "-np",
                str(n),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            self.port,
            SERVER_START_S,
        )

    def complete(self, prompt: list[int]) -> None:
        body = json.dumps(
            {"prompt": prompt, "max_tokens": N_GEN, "temperature": 0, "ignore_eos": True, **self.extra}
        ).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=REQUEST_S) as r:
            out = json.loads(r.read())
        if out["usage"]["completion_tokens"] != N_GEN:
            raise RuntimeError(f"expected {N_GEN} tokens, got {out['usage']}")

    def stream(self, prompt: list[int], n_gen: int) -> list[float]:
        """When each of the ``n_gen`` greedy tokens of a streamed ``/v1/completions`` arrived
        (``time.perf_counter``, one per SSE event with text)."""
        body = {"prompt": prompt, "max_tokens": n_gen, "temperature": 0, "ignore_eos": True, "stream": True}
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/completions",
            json.dumps({**body, **self.extra}).encode(),
            {"Content-Type": "application/json"},
        )
        arrived = []
        with urllib.request.urlopen(req, timeout=REQUEST_S) as r:
            for line in r:
                if line.startswith(b"data: {") and json.loads(line[6:])["choices"][0].get("text"):
                    arrived.append(time.perf_counter())
        return arrived

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def timed_server(server: HttpServer, n_vocab: int, n: int, repeats: int) -> float:
    """Median wall seconds of ``n`` concurrent clients, after one warm-up request; then stopped."""
    try:
        server.complete(prompts(n_vocab, 1)[0])  # warm-up
        return median(
            [run_threads([lambda p=p: server.complete(p) for p in prompts(n_vocab, n)]) for _ in range(repeats)]
        )
    finally:
        server.close()


def server_run(binary: Path, model: str, threads: int, n: int, n_vocab: int, repeats: int) -> float:
    """llama-server answering each prompt afresh (no prompt cache), as llama-batched-bench does."""
    server = HttpServer([str(binary), "--no-webui", "-kvu"], model, threads, n, {"cache_prompt": False})
    return timed_server(server, n_vocab, n, repeats)


def short_during_long(llm, ban: dict) -> tuple[float, float]:
    """Seconds until a 16-token request sent 1 s into a 384-token one ends, and until the long one ends."""
    done: dict[str, float] = {}
    t0 = time.perf_counter()

    def long():
        llm(prompts(llm.n_vocab(), 1)[0], max_tokens=384, temperature=0.0, logit_bias=ban)
        done["long"] = time.perf_counter() - t0

    def short():
        time.sleep(1.0)
        llm(prompts(llm.n_vocab(), 2)[1], max_tokens=16, temperature=0.0, logit_bias=ban)
        done["short"] = time.perf_counter() - t0

    run_threads([long, short])
    return done["short"], done["long"]


def bench(model: str, threads: int, repeats: int, tools: Path | None) -> tuple[list[dict], tuple[float, float]]:
    batched = tools / "llama-batched-bench" if tools and (tools / "llama-batched-bench").is_file() else None
    server = tools / "llama-server" if tools and (tools / "llama-server").is_file() else None
    rows = []
    with batched_llama(model, threads, max(CALLERS)) as llm:
        ban = eog_ban(llm)
        ours(llm, 2, ban)  # warm-up, as llama-batched-bench does
        for n, mine, native in paired_runs(
            CALLERS,
            repeats,
            lambda n: ours(llm, n, ban),
            (lambda n: batched_bench(batched, model, threads, n)) if batched else None,
        ):
            rows.append(
                {
                    "callers": n,
                    "ffi_s": median(mine),
                    "asyncio_s": median([ours_asyncio(llm, n, ban) for _ in range(repeats)]),
                    "batched_s": median(native),
                    "server_s": server_run(server, model, threads, n, llm.n_vocab(), repeats)
                    if server
                    else float("nan"),
                }
            )
        latency = short_during_long(llm, ban)
    return rows, latency


def concurrent_table(rows: list[dict], latency: tuple[float, float]) -> str:
    out = [
        "| callers | llama-batched-bench s | llama-server s | llama-ffi s (threads) | llama-ffi s (asyncio) | "
        "llama-ffi gen t/s | batched-bench / llama-ffi | llama-server / llama-ffi | asyncio / threads |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['callers']} | {r['batched_s']:.2f} | {r['server_s']:.2f} | {r['ffi_s']:.2f} | "
            f"{r['asyncio_s']:.2f} | {r['callers'] * N_GEN / r['ffi_s']:.1f} | {r['batched_s'] / r['ffi_s']:.2f} | "
            f"{r['server_s'] / r['ffi_s']:.2f} | {r['asyncio_s'] / r['ffi_s']:.2f} |"
        )
    out.append("")
    out.append(
        f"a 16-token request sent 1 s into a 384-token one: done after {latency[0]:.2f} s; "
        f"the long one after {latency[1]:.2f} s"
    )
    return "\n".join(out)
