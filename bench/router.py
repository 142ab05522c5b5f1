"""The benchmark's router table: what router mode adds to a request. One model served alone
(``llama-ffi serve -m``) and the same model as the one entry of a router's preset
(``--models-preset``), both with one slot; short requests (a few prompt tokens, one generated) one
after another, the two servers in turns; the median milliseconds per request of each, and their
difference (the router's own work: reading the body's ``model`` and forwarding the call)."""

from __future__ import annotations

import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import median
from bench.concurrent import HttpServer

REQUESTS = 40  # per turn


def _latencies(server: HttpServer, n: int) -> list[float]:
    body = json.dumps({"model": "m", "prompt": "Hello there", "max_tokens": 1, "temperature": 0}).encode()
    out = []
    for _ in range(n):
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.port}/v1/completions", body, {"Content-Type": "application/json"}
        )
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as r:
            json.loads(r.read())
        out.append((time.perf_counter() - started) * 1000)
    return out


def bench(model: str, threads: int, repeats: int) -> dict:
    serve = [sys.executable, "-m", "llama_ffi.server"]
    with tempfile.TemporaryDirectory() as scratch:
        preset = Path(scratch) / "models.ini"
        preset.write_text(f"[m]\nmodel = {model}\n")
        alone = HttpServer(serve, model, threads, 1)
        routed = HttpServer([*serve, "--models-preset", str(preset)], None, threads, 1)
        try:
            _latencies(alone, 3)  # warm-up (the router loads its model at its first request)
            _latencies(routed, 3)
            single, router = [], []
            for _ in range(max(1, repeats)):
                single += _latencies(alone, REQUESTS)
                router += _latencies(routed, REQUESTS)
        finally:
            alone.close()
            routed.close()
    return {"single_ms": median(single), "router_ms": median(router), "requests": len(single)}


def router_table(row: dict) -> str:
    added = row["router_ms"] - row["single_ms"]
    return "\n".join(
        [
            "| mode | ms per request (median) |",
            "|---|---:|",
            f"| one model (-m) | {row['single_ms']:.2f} |",
            f"| router (--models-preset, one model) | {row['router_ms']:.2f} |",
            f"| added by the router | {added:+.2f} |",
        ]
    )
