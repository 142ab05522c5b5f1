"""What the benchmark's tables share: medians, peak memory, llama.cpp's tools, and the single-sequence
prompt and generation tests of llama-ffi and llama-bench."""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

N_PROMPT, N_GEN = 256, 128
PROMPT_SIZES = (256, 512)  # the prompt table: llama-bench's pp256 and pp512


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def paired_runs(counts, repeats: int, ours, native=None) -> Iterator[tuple[int, list[float], list[float]]]:
    """(count, ours' results, native's), count by count as measured (a caller may time more for a
    count before the next): each of our runs right after its native counterpart (when there is
    one), so both see the same machine speed."""
    for n in counts:
        mine, theirs = [], []
        for _ in range(repeats):
            if native is not None:
                theirs.append(native(n))
            mine.append(ours(n))
        yield n, mine, theirs


def _peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0


def find_llama_bench(explicit: str | None) -> Path | None:
    candidates = [
        explicit,
        os.environ.get("LLAMA_BENCH"),
        "build/llama.cpp-reference/bin/llama-bench",
        shutil.which("llama-bench"),
    ]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    return None


def native_test(binary: Path, model: str, threads: int, n_prompt: int, n_gen: int, *extra: str) -> float:
    """Tokens/s of one llama-bench test (``-p n_prompt -n n_gen``, one repeat)."""
    cmd = [
        str(binary),
        "-m",
        model,
        "-t",
        str(threads),
        "-p",
        str(n_prompt),
        "-n",
        str(n_gen),
        "-r",
        "1",
        "-o",
        "json",
        *extra,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]["avg_ts"]


def ffi_prompt_test(model: str, threads: int, n_prompt: int = N_PROMPT, **options) -> tuple[float, float, float]:
    """(load seconds, cold prompt tokens/s, warm prompt tokens/s) for a prompt of ``n_prompt``
    tokens. Cold is a fresh context's first decode, what a user's first prompt costs (the
    weights' pages are touched for the first time, the compute buffers first used); warm is the
    same prompt again after clearing the cache, which is what llama-bench times after its warm-up."""
    from llama_ffi.high import Llama

    # One context per test, sized as llama-bench sizes its own (n_prompt, resp. n_gen): the
    # attention work per token grows with the cache, so equal sizes compare equal work.
    t0 = time.perf_counter()
    with Llama(model, n_ctx=n_prompt, n_threads=threads, n_threads_batch=threads, progress=False, **options) as llm:
        load = time.perf_counter() - t0
        prompt = [(i * 7919) % llm.n_vocab for i in range(n_prompt)]
        t0 = time.perf_counter()
        llm.eval(prompt)
        cold = n_prompt / (time.perf_counter() - t0)
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        return load, cold, n_prompt / (time.perf_counter() - t0)


def run_elsewhere(python: str, code: str, *args: str, **run: object) -> subprocess.CompletedProcess:
    """``python -c code args`` away from the checkout, whose ``llama_ffi`` would shadow that
    Python's own install (e.g. a venv holding the wheel), with this benchmark importable beside
    it. ``run``: more of ``subprocess.run``'s arguments (``timeout``...)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory(prefix="llama-ffi-probe-") as elsewhere:
        (Path(elsewhere) / "bench").symlink_to(Path(__file__).resolve().parent)
        return subprocess.run(
            [python, "-c", code, *args], capture_output=True, text=True, cwd=elsewhere, env=env, **run
        )


def ffi_generation_test(model: str, threads: int, **options) -> tuple[float, float]:
    """(tokens/s, overhead ms/token) of N_GEN greedy tokens with end-of-generation banned."""
    from llama_ffi import lib
    from llama_ffi.high import Llama

    with Llama(model, n_ctx=N_GEN, n_threads=threads, n_threads_batch=threads, progress=False, **options) as llm:
        ban = eog_ban(llm)
        bos = [llm.token_bos()]
        for _ in llm.generate(bos, temperature=0.0, max_tokens=2):  # warm-up, as llama-bench does
            pass
        llm.reset()
        in_decode = lib.llama_ffi_decode_seconds()
        t0 = time.perf_counter()
        n = sum(1 for _ in llm.generate(bos, temperature=0.0, max_tokens=N_GEN, logit_bias=ban))
        wall = time.perf_counter() - t0
        in_decode = lib.llama_ffi_decode_seconds() - in_decode  # summed inside llama_decode
        return n / wall, (wall - in_decode) * 1e3 / n


# Many sequences at once (the parallel and concurrent tables), sized as llama-batched-bench runs.
BATCHED_CTX, BATCHED_BATCH, BATCHED_UBATCH = 4096, 2048, 512


def batched_llama(model: str, threads: int, n_seq_max: int):
    """A Llama sized like the llama-batched-bench runs it is compared with (unified KV cache)."""
    from llama_ffi.high import Llama

    return Llama(
        model,
        n_ctx=BATCHED_CTX,
        n_batch=BATCHED_BATCH,
        n_ubatch=BATCHED_UBATCH,
        n_threads=threads,
        n_threads_batch=threads,
        n_seq_max=n_seq_max,
        kv_unified=True,
        progress=False,
    )


def eog_ban(llm) -> dict[int, float]:
    """Logit biases that bar every end-of-generation token (generation runs its full length)."""
    return {t: -float("inf") for t in llm.tokenizer.end_of_generation()}


def batched_bench_row(
    binary: Path, model: str, threads: int, n_prompt: int, n_gen: int, n_seq: int, timeout: float | None = None
) -> dict:
    """llama-batched-bench's result row for ``n_seq`` sequences (its JSON line)."""
    cmd = [
        str(binary),
        "-m",
        model,
        "-t",
        str(threads),
        "-tb",
        str(threads),
        "-c",
        str(BATCHED_CTX),
        "-b",
        str(BATCHED_BATCH),
        "-ub",
        str(BATCHED_UBATCH),
        "-npp",
        str(n_prompt),
        "-ntg",
        str(n_gen),
        "-npl",
        str(n_seq),
        "-kvu",
        "--output-format",
        "jsonl",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout)
    rows = [json.loads(line) for line in (out.stdout + out.stderr).splitlines() if line.startswith("{")]
    return rows[-1]
