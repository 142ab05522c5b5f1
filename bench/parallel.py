"""The benchmark's parallel table: aggregate generation tokens/s of 1, 2, 4, 8 and 16 sequences
decoded together (one prompt each, ``N_PROMPT`` tokens, then ``N_GEN`` greedy tokens with
end-of-generation banned), next to llama.cpp's ``llama-batched-bench`` with the same prompt length,
generation length, context, batch sizes, unified KV cache and threads. Each llama-ffi run follows
its native counterpart; the ratio is the median of those pairs. llama-ffi's figure is the wall
time of its generation steps (batch, decode and sampling), as llama-batched-bench's T_TG is."""

from __future__ import annotations

from pathlib import Path

from bench.common import batched_bench_row, batched_llama, eog_ban, median, paired_runs

SEQUENCES = (1, 2, 4, 8, 16)
N_PROMPT, N_GEN = 32, 128


def native(binary: Path, model: str, threads: int, n_seq: int) -> float:
    return float(batched_bench_row(binary, model, threads, N_PROMPT, N_GEN, n_seq)["speed_tg"])


def ours(llm, n_seq: int, ban: dict) -> float:
    prompts = [[(i * 7919 + 131 * s) % llm.n_vocab() for i in range(N_PROMPT)] for s in range(n_seq)]
    stats = llm.engine.stats
    tokens, seconds = stats.generated_tokens, stats.generation_s
    llm(prompts, max_tokens=N_GEN, temperature=0.0, logit_bias=ban)
    return (stats.generated_tokens - tokens) / (stats.generation_s - seconds)


def bench(model: str, threads: int, repeats: int, batched_bench: Path | None) -> list[dict]:
    with batched_llama(model, threads, max(SEQUENCES)) as llm:
        ban = eog_ban(llm)
        ours(llm, 2, ban)  # warm-up, as llama-batched-bench does
        runs = paired_runs(
            SEQUENCES,
            repeats,
            lambda n: ours(llm, n, ban),
            (lambda n: native(batched_bench, model, threads, n)) if batched_bench else None,
        )
        return [
            {
                "n_seq": n_seq,
                "ffi": median(mine),
                "native": median(theirs),
                "ratio": median([m / t for m, t in zip(mine, theirs)]) if theirs else float("nan"),
            }
            for n_seq, mine, theirs in runs
        ]


def parallel_table(rows: list[dict]) -> str:
    single = rows[0]["ffi"]
    out = [
        "| sequences | llama-batched-bench gen t/s | llama-ffi gen t/s | vs native | vs 1 sequence |",
        "|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {r['n_seq']} | {r['native']:.1f} | {r['ffi']:.1f} | {r['ratio']:.3f} | {r['ffi'] / single:.2f} |"
        for r in rows
    ]
    return "\n".join(out)
