"""Side-by-side benchmark: llama.cpp's native ``llama-bench``, llama-ffi, and llama-cpp-python
(when installed), on the same model and thread count.

    python -m llama_ffi.bench [-m MODEL] [-t 2] [-r 5] [--llama-bench PATH] [-s [--draft-model D]]

Measured per implementation: load time, prompt t/s (256 tokens), generation t/s (128 tokens,
greedy, EOS ignored), overhead per generated token (wall time minus the time llama.cpp reports
inside ``llama_decode``), and peak RSS. Figures are medians over the repeats; the machine's load
is printed next to them. ``llama-bench`` comes from ``python -m tools.native_build --reference``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

N_PROMPT, N_GEN = 256, 128


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0


def find_llama_bench(explicit: str | None) -> Path | None:
    candidates = [explicit, os.environ.get("LLAMA_BENCH"),
                  "build/llama.cpp-reference/bin/llama-bench", shutil.which("llama-bench")]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    return None


def bench_native(binary: Path, model: str, threads: int, repeats: int) -> dict:
    cmd = [str(binary), "-m", model, "-t", str(threads), "-p", str(N_PROMPT), "-n", str(N_GEN),
           "-r", str(repeats), "-o", "json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    rows = json.loads(out.stdout)
    pp = next(r for r in rows if r["n_prompt"] == N_PROMPT and r["n_gen"] == 0)
    tg = next(r for r in rows if r["n_gen"] == N_GEN and r["n_prompt"] == 0)
    return {"name": "llama.cpp llama-bench", "load_s": float("nan"), "pp_tps": pp["avg_ts"],
            "tg_tps": tg["avg_ts"], "overhead_ms": 0.0, "rss_mb": _peak_rss_mb(resource.RUSAGE_CHILDREN),
            "note": f"{wall:.1f} s for its runs"}


def bench_llama_ffi(model: str, threads: int, repeats: int) -> dict:
    from llama_ffi import lib
    from llama_ffi.high import Llama

    loads, pps, tgs, overheads = [], [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        llm = Llama(model, n_ctx=N_PROMPT + N_GEN + 16, n_threads=threads, n_threads_batch=threads,
                    progress=False)
        loads.append(time.perf_counter() - t0)
        prompt = [(i * 7919) % llm.n_vocab for i in range(N_PROMPT)]
        t0 = time.perf_counter()
        llm.eval(prompt)
        pps.append(N_PROMPT / (time.perf_counter() - t0))
        llm.reset()
        eog = [t for t in range(llm.n_vocab) if lib.llama_vocab_is_eog(llm._model.vocab_ptr, t)]
        bos = [llm.token_bos()]
        in_decode = lib.llama_ffi_decode_seconds()
        t0 = time.perf_counter()
        n = sum(1 for _ in llm.generate(bos, temperature=0.0, max_tokens=N_GEN,
                                        logit_bias={t: -float("inf") for t in eog}))
        wall = time.perf_counter() - t0
        in_decode = lib.llama_ffi_decode_seconds() - in_decode  # summed inside llama_decode
        tgs.append(n / wall)
        overheads.append((wall - in_decode) * 1e3 / n)
        llm.close()
    return {"name": "llama-ffi", "load_s": _median(loads), "pp_tps": _median(pps),
            "tg_tps": _median(tgs), "overhead_ms": _median(overheads), "rss_mb": _peak_rss_mb(), "note": ""}


def bench_llama_cpp_python(model: str, threads: int, repeats: int) -> dict | None:
    try:
        import llama_cpp
    except ImportError:
        return None
    loads, pps, tgs = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        llm = llama_cpp.Llama(model, n_ctx=N_PROMPT + N_GEN + 16, n_threads=threads,
                              n_threads_batch=threads, verbose=False)
        loads.append(time.perf_counter() - t0)
        prompt = [(i * 7919) % llm.n_vocab() for i in range(N_PROMPT)]
        t0 = time.perf_counter()
        llm.eval(prompt)
        pps.append(N_PROMPT / (time.perf_counter() - t0))
        llm.reset()
        bos = [llm.token_bos()]
        t0 = time.perf_counter()
        n = 0
        for _tok in llm.generate(bos, temp=0.0, logits_processor=None):
            n += 1
            if n >= N_GEN:
                break
        tgs.append(n / (time.perf_counter() - t0))
        llm.close()
    return {"name": f"llama-cpp-python {llama_cpp.__version__}", "load_s": _median(loads),
            "pp_tps": _median(pps), "tg_tps": _median(tgs), "overhead_ms": float("nan"),
            "rss_mb": _peak_rss_mb(), "note": "in-process after llama-ffi: RSS is the max of both"}


def _texts(n: int, words: int) -> list[str]:
    vocab = ("river stone light quiet market garden signal paper winter engine silver forest "
             "window harbor letter orange thunder music").split()
    return [" ".join(vocab[(i * 7 + j * 3) % len(vocab)] for j in range(words)) + f" {i}." for i in range(n)]


EMBEDDING_SETS = (("1000 short", 1000, 8), ("100 long", 100, 200))


def bench_embeddings_ffi(model: str, threads: int, repeats: int) -> list[dict]:
    from llama_ffi.high import LlamaEmbedding

    rows = []
    with LlamaEmbedding(model, n_threads=threads, n_threads_batch=threads) as emb:
        for label, n, words in EMBEDDING_SETS:
            texts = _texts(n, words)
            n_tokens = sum(len(emb.tokenize(t)) for t in texts)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                emb.embed(texts)
                times.append(time.perf_counter() - t0)
            t = _median(times)
            rows.append({"name": "llama-ffi", "set": label, "texts_s": n / t, "tokens_s": n_tokens / t})
    return rows


def bench_embeddings_native(binary: Path, model: str, threads: int) -> list[dict]:
    """llama-embedding over the same texts (one per line); its model load is timed apart with a
    one-text run and subtracted, so the figure is comparable with the in-process ones."""
    rows = []
    def run(texts: list[str]) -> float:
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write("\n".join(texts))
            f.flush()
            t0 = time.perf_counter()
            subprocess.run([str(binary), "-m", model, "-t", str(threads), "-b", "2048", "-ub", "2048",
                            "--embd-output-format", "array", "-f", f.name],
                           capture_output=True, check=True)
            return time.perf_counter() - t0
    base = run(["x"])
    for label, n, words in EMBEDDING_SETS:
        t = max(run(_texts(n, words)) - base, 1e-9)
        rows.append({"name": "llama.cpp llama-embedding", "set": label, "texts_s": n / t, "tokens_s": float("nan")})
    return rows


def bench_embeddings_llama_cpp_python(model: str, threads: int, repeats: int) -> list[dict]:
    try:
        import llama_cpp
    except ImportError:
        return []
    rows = []
    llm = llama_cpp.Llama(model, embedding=True, n_threads=threads, n_threads_batch=threads, verbose=False,
                          n_ctx=512, n_batch=512)
    for label, n, words in EMBEDDING_SETS:
        texts = _texts(n, words)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            llm.embed(texts)
            times.append(time.perf_counter() - t0)
        rows.append({"name": f"llama-cpp-python {llama_cpp.__version__}", "set": label,
                     "texts_s": n / _median(times), "tokens_s": float("nan")})
    return rows


# Plain completions. SmolLM2 continues the first three with output that repeats what came before
# (more methods of the same shape, more records); the last is free text.
SPEC_PROMPTS = {
    "code (repetitive)": "class Vector:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
                         "    def add(self, other):\n        return Vector(self.x + other.x, self.y + other.y)\n\n"
                         "    def sub(self, other):\n        return Vector(self.x - other.x, self.y - other.y)\n\n"
                         "    def mul(self, other):\n",
    "JSON (repetitive)": '[\n  {"id": 1, "name": "user", "email": "user@example.com", "active": true},\n'
                         '  {"id": 2, "name": "user", "email": "user@example.com", "active": true},\n',
    "table (repetitive)": "| parameter | type | default |\n|---|---|---|\n| n_ctx | int | 512 |\n"
                          "| n_batch | int | 512 |\n| n_ubatch | int | 512 |\n",
    "free text": "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    # n-gram speculation's home ground: output that repeats text from the context (an edit, a quote)
    "copy (repetitive)": (
        "Llamas are domesticated South American camelids, widely used as meat and pack animals by "
        "Andean cultures since the pre-Columbian era. Llamas are social animals and live with others "
        "as a herd. Their wool is soft and contains only a small amount of lanolin. Llamas can learn "
        "simple tasks after a few repetitions. When using a pack, they can carry about 25 to 30 "
        "percent of their body weight for 8 to 13 km.\n\nHere is the same paragraph again, copied "
        "word for word:\n\nLlamas are domesticated"),
}
SPEC_GEN = 256


def bench_speculative(model: str, threads: int, repeats: int, draft_model: str | None) -> list[dict]:
    """Greedy generation of SPEC_GEN tokens per prompt: plain vs n-gram vs draft model. The
    engines take turns within each repeat, so a drift in machine speed hits them alike. Rates:
    whole call (prompt included) and decoding alone (after the first token: the prompt's
    evaluation is the same work for every engine)."""
    from llama_ffi.high import Llama
    from llama_ffi.high.speculative import SpecConfig, SpeculativeType

    configs = {"plain": None, "ngram-map-k": SpecConfig(type=SpeculativeType.NGRAM_MAP_K),
               "ngram-map-k4v": SpecConfig(type=SpeculativeType.NGRAM_MAP_K4V)}
    if draft_model:
        configs["draft"] = SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=draft_model)
    engines = {name: Llama(model, n_ctx=1024, n_threads=threads, n_threads_batch=threads,
                           progress=False, speculative=cfg) for name, cfg in configs.items()}
    runs: dict[tuple[str, str], dict] = {}
    try:
        for _ in range(repeats):
            for label, prompt in SPEC_PROMPTS.items():
                for name, llm in engines.items():
                    llm.reset()
                    t0 = time.perf_counter()
                    first, pieces = None, []
                    for chunk in llm(prompt, max_tokens=SPEC_GEN, temperature=0, stream=True):
                        if first is None:
                            first = time.perf_counter()
                        pieces.append(chunk["choices"][0]["text"])
                    wall = time.perf_counter() - t0
                    n = chunk["usage"]["completion_tokens"]
                    run = runs.setdefault((name, label), {"engine": name, "prompt": label, "rates": [],
                                                          "decode_rates": []})
                    run["rates"].append(n / wall)
                    run["decode_rates"].append((n - 1) / (t0 + wall - first))
                    run["stats"], run["text"] = llm.last_speculative_stats, "".join(pieces)
    finally:
        for llm in engines.values():
            llm.close()
    rows = sorted(runs.values(), key=lambda r: (list(SPEC_PROMPTS).index(r["prompt"]), list(configs).index(r["engine"])))
    for r in rows:
        plain = runs[("plain", r["prompt"])]
        r["tps"] = _median(r["rates"])
        r["speedup"] = r["tps"] / _median(plain["rates"])
        r["decode_tps"] = _median(r["decode_rates"])
        r["decode_speedup"] = r["decode_tps"] / _median(plain["decode_rates"])
        r["identical"] = r["text"] == plain["text"]
    return rows


def speculative_table(rows: list[dict]) -> str:
    out = ["| prompt | engine | t/s | speedup | decode t/s | decode speedup | drafted | accepted | "
           "acceptance | mean accepted | same text |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        s = r["stats"]
        figures = (f"{s.drafted_tokens} | {s.accepted_tokens} | {s.acceptance_rate:.0%} | "
                   f"{s.mean_accepted_length:.2f}") if s else "– | – | – | –"
        out.append(f"| {r['prompt']} | {r['engine']} | {r['tps']:.1f} | {r['speedup']:.2f} | "
                   f"{r['decode_tps']:.1f} | {r['decode_speedup']:.2f} | {figures} | "
                   f"{'yes' if r['identical'] else 'NO'} |")
    return "\n".join(out)


def embedding_table(rows: list[dict]) -> str:
    out = ["| implementation | inputs | texts/s | tokens/s |", "|---|---|---:|---:|"]
    out += [f"| {r['name']} | {r['set']} | {r['texts_s']:.1f} | {r['tokens_s']:.0f} |" for r in rows]
    return "\n".join(out)


def table(rows: list[dict], native: dict | None) -> str:
    out = ["| implementation | load s | prompt t/s (256) | gen t/s (128) | gen vs native | "
           "overhead ms/token | peak RSS MB | note |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ratio = r["tg_tps"] / native["tg_tps"] if native else float("nan")
        out.append(f"| {r['name']} | {r['load_s']:.3f} | {r['pp_tps']:.1f} | {r['tg_tps']:.1f} | "
                   f"{ratio:.3f} | {r['overhead_ms']:.3f} | {r['rss_mb']:.0f} | {r['note']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", help="GGUF model (default: SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--repeats", type=int, default=5)
    ap.add_argument("--llama-bench", help="path of llama.cpp's llama-bench")
    ap.add_argument("-e", "--embedding-model", help="an embedding GGUF (e.g. MiniLM f16): adds the "
                    "embedding throughput table")
    ap.add_argument("--skip-generation", action="store_true")
    ap.add_argument("-s", "--speculative", action="store_true", help="add the speculative decoding "
                    "table: plain vs n-gram (vs a draft model with --draft-model)")
    ap.add_argument("--draft-model", help="a draft GGUF with the model's vocabulary (e.g. from "
                    "python -m tools.draft_model MODEL OUT --layers 6)")
    args = ap.parse_args(argv)
    if args.model is None:
        from llama_ffi import registry

        args.model = str(registry.fetch(registry.DEFAULT_MODEL))
    print(f"model {args.model}, {args.threads} threads, {args.repeats} repeats, "
          f"{os.cpu_count()} CPUs, load average before: {os.getloadavg()}")
    if args.embedding_model:
        erows = bench_embeddings_ffi(args.embedding_model, args.threads, args.repeats)
        erows += bench_embeddings_llama_cpp_python(args.embedding_model, args.threads, args.repeats)
        bench_bin = find_llama_bench(args.llama_bench)
        native_embedding = bench_bin.with_name("llama-embedding") if bench_bin else None
        if native_embedding and native_embedding.is_file():
            erows += bench_embeddings_native(native_embedding, args.embedding_model, args.threads)
        print(embedding_table(erows))
    if args.speculative:
        print(speculative_table(bench_speculative(args.model, args.threads, args.repeats, args.draft_model)))
    if args.skip_generation:
        return 0
    rows, native = [], None
    binary = find_llama_bench(args.llama_bench)
    if binary:
        native = bench_native(binary, args.model, args.threads, args.repeats)
        rows.append(native)
    else:
        print("llama-bench not found (build it: python -m tools.native_build --reference)", file=sys.stderr)
    rows.append(bench_llama_ffi(args.model, args.threads, args.repeats))
    other = bench_llama_cpp_python(args.model, args.threads, args.repeats)
    if other:
        rows.append(other)
    else:
        print("llama-cpp-python is not installed: its row is left out", file=sys.stderr)
    print(table(rows, native))
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
