"""The thread-pool table: llama-ffi on two builds of llama.cpp's libraries (e.g. ggml's own thread
pool against GCC's OpenMP, ``GGML_OPENMP``), each test in a fresh subprocess that loads the
libraries of its folder (``LD_LIBRARY_PATH`` comes before the extension's run path), the two builds
in turns so that both see the same machine speed. Tests: prompt processing (``N_PROMPT`` tokens,
warm), generation (``N_GEN`` greedy tokens), 8 sequences at once; each with the given threads, with
twice as many threads as cores (oversubscribed), beside a busy process on every core, and beside a
second ``Llama`` in the same process that has answered once and sits idle (an idle loop must not
hold threads that slow the busy one: ``engine.core.RELEASE_THREADS_AFTER_S``).

    python -m tools.native_build  # then, e.g.:
    LLAMA_FFI_BUILD_DIR=build/llama.cpp-no-openmp CMAKE_ARGS=-DGGML_OPENMP=OFF python -m tools.native_build
    python -m bench --thread-pool build/llama.cpp/bin build/llama.cpp-no-openmp/bin
    python -m bench --thread-pool build/llama.cpp/bin WHEEL_VENV/bin/python  # the wheel's own build
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import median, run_elsewhere

_PROBE = """
import json, sys
from bench.common import batched_llama, eog_ban, ffi_generation_test, ffi_prompt_test, N_PROMPT
from bench.constrained import in_process
from llama_ffi.high import Llama
model, threads, idle_llama = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
if idle_llama:
    other = Llama(model, n_ctx=64, n_threads=threads, progress=False)
    other("Hello", max_tokens=2)
pp = ffi_prompt_test(model, threads, N_PROMPT)[2]
tg = ffi_generation_test(model, threads)[0]
with batched_llama(model, threads, 8) as llm:
    c8 = in_process(llm, 8, eog_ban(llm), None)
print(json.dumps({"pp": pp, "tg": tg, "c8": c8}))
"""
SCENARIOS = ("alone", "oversubscribed", "beside a busy process", "beside an idle Llama")
PROBE_S = 240.0  # a probe slower than this is recorded as stalled (OpenMP's spinning threads can take hours)


@contextlib.contextmanager
def _busy(on: bool):
    """A busy process on every core while the test runs (``on``)."""
    procs = []
    if on:
        spin = "while True: pass"
        procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _probe(build: Path, model: str, threads: int, busy: bool, idle_llama: bool) -> dict:
    """The probe's figures; 0 t/s for every test where it stalled past ``PROBE_S``. ``build``: a
    folder of libraries (this Python's llama-ffi on them), or another Python with llama-ffi
    installed (e.g. a venv holding the portable wheel), which runs the probe on its own install."""
    args = (model, str(threads), str(int(idle_llama)))
    with _busy(busy):
        try:
            if build.is_dir():
                env = {**os.environ, "LD_LIBRARY_PATH": str(build.resolve())}
                command = [sys.executable, "-c", _PROBE, *args]
                proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=PROBE_S)
            else:
                proc = run_elsewhere(str(build), _PROBE, *args, timeout=PROBE_S)
        except subprocess.TimeoutExpired:
            return {"pp": 0.0, "tg": 0.0, "c8": 0.0}
    if proc.returncode != 0:
        raise RuntimeError(f"the probe failed on {build}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench(model: str, threads: int, repeats: int, lib_dirs: list[Path]) -> list[dict]:
    cores = os.cpu_count() or 2
    settings = {
        "alone": (threads, False, False),
        "oversubscribed": (2 * cores, False, False),
        "beside a busy process": (threads, True, False),
        "beside an idle Llama": (threads, False, True),
    }
    rows = []
    for scenario in SCENARIOS:
        n_threads, busy, idle_llama = settings[scenario]
        runs: dict[Path, list[dict]] = {d: [] for d in lib_dirs}
        for _ in range(repeats):
            for lib_dir in lib_dirs:
                runs[lib_dir].append(_probe(lib_dir, model, n_threads, busy, idle_llama))
        first = runs[lib_dirs[0]]
        for lib_dir, results in runs.items():
            row = {"libraries": str(lib_dir), "scenario": scenario, "threads": n_threads}
            for key in ("pp", "tg", "c8"):
                values = [r[key] for r in results]
                row[key] = (min(values), median(values), max(values))
                ratios = [r[key] / f[key] if f[key] else float("inf") for r, f in zip(results, first)]
                row[key + "_ratio"] = median(ratios)
            row["load"] = os.getloadavg()[0]
            rows.append(row)
    return rows


def thread_pool_table(rows: list[dict]) -> str:
    def cell(r: dict, key: str) -> str:
        low, mid, high = r[key]
        return f"{mid:.1f} ({low:.1f}–{high:.1f}) {r[key + '_ratio']:.2f}×"

    lines = [
        "## Thread pool: the same tests on each build (t/s median (min–max), × the first build; "
        f"0: stalled past {PROBE_S:.0f} s)",
        "",
        "| scenario | threads | libraries | prompt t/s | generation t/s | 8 sequences t/s | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['threads']} | {r['libraries']} | {cell(r, 'pp')} | {cell(r, 'tg')} "
            f"| {cell(r, 'c8')} | {r['load']:.2f} |"
        )
    return "\n".join(lines)
