"""Two builds of llama-ffi side by side: this Python's and another's (e.g. a venv holding the
portable wheel), each test run in a fresh subprocess of each, in turns, so that both see the same
machine speed; a ratio is the median of the back-to-back ratios."""

from __future__ import annotations

import json
import sys

from bench.common import N_PROMPT, median, run_elsewhere

# Run in each interpreter: the same tests the main table runs, with that interpreter's llama-ffi.
_PROBE = """
import json, sys
import llama_ffi
from bench.common import ffi_generation_test, ffi_prompt_test
model, threads, n_prompt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
_, _, pp = ffi_prompt_test(model, threads, n_prompt)
tg, overhead = ffi_generation_test(model, threads)
info = llama_ffi.build_info()
print(json.dumps({"pp": pp, "tg": tg, "overhead": overhead, "variant": info["cpu_variant"],
                  "where": llama_ffi.__file__}))
"""


def probe(python: str, model: str, threads: int) -> dict:
    """Prompt and generation t/s of ``python``'s own llama-ffi install."""
    proc = run_elsewhere(python, _PROBE, model, str(threads), str(N_PROMPT))
    if proc.returncode != 0:
        raise RuntimeError(f"{python} could not run the probe:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench(model: str, threads: int, repeats: int, other_python: str) -> list[dict]:
    runs: dict[str, list[dict]] = {sys.executable: [], other_python: []}
    for _ in range(repeats):
        for python in runs:
            runs[python].append(probe(python, model, threads))
    this, other = runs[sys.executable], runs[other_python]
    rows = []
    for python, results in runs.items():
        rows.append(
            {
                "python": python,
                "where": results[0]["where"],
                "variant": results[0]["variant"],
                "pp_tps": median([r["pp"] for r in results]),
                "tg_tps": median([r["tg"] for r in results]),
                "overhead_ms": median([r["overhead"] for r in results]),
            }
        )
    rows[1]["pp_ratio"] = median([o["pp"] / t["pp"] for o, t in zip(other, this)])
    rows[1]["tg_ratio"] = median([o["tg"] / t["tg"] for o, t in zip(other, this)])
    return rows


def builds_table(rows: list[dict]) -> str:
    lines = [
        f"| build (package) | CPU library | pp{N_PROMPT} t/s | tg t/s | overhead ms/token | × this build |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        ratio = f"pp {row['pp_ratio']:.2f} ×, tg {row['tg_ratio']:.2f} ×" if "tg_ratio" in row else "1"
        lines.append(
            f"| {row['where']} | {row['variant']} | {row['pp_tps']:.1f} | {row['tg_tps']:.1f} | "
            f"{row['overhead_ms']:.3f} | {ratio} |"
        )
    return "\n".join(lines)
