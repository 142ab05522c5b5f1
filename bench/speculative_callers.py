"""The benchmark's speculative-under-load table: N callers on threads, each one greedy completion of
a repetitive prompt, on a plain ``Llama`` and on speculative ones (the library's defaults), in
turns within each repeat. Drafts of every caller share the engine's batches, so this shows whether
speculation still pays, or at least costs nothing, when the batch already carries N sequences."""

from __future__ import annotations

import time

from bench.common import median
from bench.concurrent import run_threads

CALLERS = (1, 2, 4, 8)
N_GEN = 128


def bench(
    model: str, threads: int, repeats: int, prompts: dict[str, str], draft_model: str | None = None, callers=CALLERS
) -> list[dict]:
    """Per engine and number of callers: aggregate tokens/s (median) and the median ratio to plain
    within a repeat. Caller i answers prompt i (mod the prompts), so callers do not share a prefix."""
    from llama_ffi.high import Llama
    from llama_ffi.high.speculative import SpecConfig, SpeculativeType

    configs = {"plain": None, "ngram (defaults)": SpecConfig()}
    if draft_model:
        configs["draft"] = SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=draft_model)
    engines = {
        name: Llama(model, n_ctx=4096, n_threads=threads, n_threads_batch=threads, progress=False, speculative=cfg)
        for name, cfg in configs.items()
    }
    texts = list(prompts.values())
    rates: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(repeats):
            for n in callers:
                for name, llm in engines.items():
                    llm.reset()
                    produced = []

                    def call(i, llm=llm, produced=produced):
                        out = llm(texts[i % len(texts)], max_tokens=N_GEN, temperature=0)
                        produced.append(out["usage"]["completion_tokens"])

                    t0 = time.perf_counter()
                    run_threads([lambda i=i: call(i) for i in range(n)])
                    rates.setdefault((name, n), []).append(sum(produced) / (time.perf_counter() - t0))
    finally:
        for llm in engines.values():
            llm.close()
    rows = []
    for (name, n), values in rates.items():
        plain = rates[("plain", n)]
        rows.append(
            {
                "engine": name,
                "callers": n,
                "tps": median(values),
                "speedup": median([a / b for a, b in zip(values, plain)]),
            }
        )
    return sorted(rows, key=lambda r: (r["callers"], list(configs).index(r["engine"])))


def table(rows: list[dict]) -> str:
    out = ["| callers | engine | aggregate t/s | vs plain |", "|---:|---|---:|---:|"]
    out += [f"| {r['callers']} | {r['engine']} | {r['tps']:.1f} | {r['speedup']:.2f} |" for r in rows]
    return "\n".join(out)
