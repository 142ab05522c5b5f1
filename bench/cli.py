"""Side-by-side benchmark: llama.cpp's native ``llama-bench``, llama-ffi, and llama-cpp-python
(when installed), on the same model and thread count.

    python -m bench [-m MODEL] [-t 2] [-r 5] [--llama-bench PATH] [-s [--draft-model D]]

Measured per implementation: load time, prompt t/s (256 tokens, warm; a second table gives 256 and
512 tokens cold and warm against llama-bench), generation t/s (128 tokens,
greedy, EOS ignored), overhead per generated token (wall time minus the time llama.cpp reports
inside ``llama_decode``), and peak RSS. Figures are medians over the repeats; each llama-ffi test
runs right after its llama-bench counterpart, and "gen vs native" is the median of those paired
ratios (this machine's speed drifts by tens of percent within a minute). The machine's load is
printed next to them. ``llama-bench`` comes from ``python -m tools.native_build --reference``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.common import (
    N_GEN,
    N_PROMPT,
    PROMPT_SIZES,
    _peak_rss_mb,
    ffi_generation_test,
    ffi_prompt_test,
    find_llama_bench,
    median,
    native_test,
)


def bench_generation(model: str, threads: int, repeats: int, binary: Path | None) -> tuple[dict, dict | None]:
    """llama-ffi's row and llama-bench's (None without the binary). Each test runs right after
    its native counterpart, so both see the same machine speed; the ratio to native is the
    median of these back-to-back ratios."""
    ffi, native = {"load": [], "pp": [], "tg": [], "overhead": []}, {"tg": []}
    prompt = {n: {"native": [], "cold": [], "warm": []} for n in PROMPT_SIZES}
    for _ in range(repeats):
        for n in PROMPT_SIZES:
            if binary:
                prompt[n]["native"].append(native_test(binary, model, threads, n, 0))
            load, cold, warm = ffi_prompt_test(model, threads, n)
            prompt[n]["cold"].append(cold)
            prompt[n]["warm"].append(warm)
        pp = prompt[N_PROMPT]["warm"][-1]
        if binary:
            native["tg"].append(native_test(binary, model, threads, 0, N_GEN))
        tg, overhead = ffi_generation_test(model, threads)
        for key, value in (("load", load), ("pp", pp), ("tg", tg), ("overhead", overhead)):
            ffi[key].append(value)
    row = {
        "name": "llama-ffi",
        "load_s": median(ffi["load"]),
        "pp_tps": median(ffi["pp"]),
        "tg_tps": median(ffi["tg"]),
        "overhead_ms": median(ffi["overhead"]),
        "rss_mb": _peak_rss_mb(),
        "note": "",
        "prompt": prompt,
    }
    if not binary:
        return row, None
    row["tg_ratio"] = median([f / n for f, n in zip(ffi["tg"], native["tg"])])
    native_row = {
        "name": "llama.cpp llama-bench",
        "load_s": float("nan"),
        "pp_tps": median(prompt[N_PROMPT]["native"]),
        "tg_tps": median(native["tg"]),
        "overhead_ms": 0.0,
        "rss_mb": _peak_rss_mb(resource.RUSAGE_CHILDREN),
        "note": "",
    }
    return row, native_row


def bench_llama_cpp_python(model: str, threads: int, repeats: int) -> dict | None:
    try:
        import llama_cpp
    except ImportError:
        return None
    loads, pps, tgs = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        llm = llama_cpp.Llama(
            model, n_ctx=N_PROMPT + N_GEN + 16, n_threads=threads, n_threads_batch=threads, verbose=False
        )
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
    return {
        "name": f"llama-cpp-python {llama_cpp.__version__}",
        "load_s": median(loads),
        "pp_tps": median(pps),
        "tg_tps": median(tgs),
        "overhead_ms": float("nan"),
        "rss_mb": _peak_rss_mb(),
        "note": "in-process after llama-ffi: RSS is the max of both",
    }


def sample_texts(n: int, words: int) -> list[str]:
    vocab = (
        "river stone light quiet market garden signal paper winter engine silver forest "
        "window harbor letter orange thunder music"
    ).split()
    return [" ".join(vocab[(i * 7 + j * 3) % len(vocab)] for j in range(words)) + f" {i}." for i in range(n)]


EMBEDDING_SETS = (("1000 short", 1000, 8), ("100 long", 100, 200))


def bench_embeddings_ffi(model: str, threads: int, repeats: int) -> list[dict]:
    from llama_ffi.high import LlamaEmbedding

    rows = []
    with LlamaEmbedding(model, n_threads=threads, n_threads_batch=threads) as emb:
        for label, n, words in EMBEDDING_SETS:
            texts = sample_texts(n, words)
            n_tokens = sum(len(emb.tokenize(t)) for t in texts)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                emb.embed(texts)
                times.append(time.perf_counter() - t0)
            t = median(times)
            rows.append({"name": "llama-ffi", "set": label, "texts_s": n / t, "tokens_s": n_tokens / t})
    return rows


def embedding_seconds(binary: Path, model: str, threads: int, texts: list[str]) -> float:
    """Wall seconds of one llama-embedding run over ``texts`` (one per line), its model load included."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("\n".join(texts))
        f.flush()
        t0 = time.perf_counter()
        command = [str(binary), "-m", model, "-t", str(threads), "-b", "2048", "-ub", "2048"]
        command += ["--embd-output-format", "array", "-f", f.name]
        subprocess.run(command, capture_output=True, check=True)
        return time.perf_counter() - t0


def bench_embeddings_native(binary: Path, model: str, threads: int) -> list[dict]:
    """llama-embedding over the same texts; its model load is timed apart with a one-text run and
    subtracted, so the figure is comparable with the in-process ones."""
    rows = []
    base = embedding_seconds(binary, model, threads, ["x"])
    for label, n, words in EMBEDDING_SETS:
        t = max(embedding_seconds(binary, model, threads, sample_texts(n, words)) - base, 1e-9)
        rows.append({"name": "llama.cpp llama-embedding", "set": label, "texts_s": n / t, "tokens_s": float("nan")})
    return rows


def bench_embeddings_llama_cpp_python(model: str, threads: int, repeats: int) -> list[dict]:
    try:
        import llama_cpp
    except ImportError:
        return []
    rows = []
    llm = llama_cpp.Llama(
        model, embedding=True, n_threads=threads, n_threads_batch=threads, verbose=False, n_ctx=512, n_batch=512
    )
    for label, n, words in EMBEDDING_SETS:
        texts = sample_texts(n, words)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            llm.embed(texts)
            times.append(time.perf_counter() - t0)
        rows.append(
            {
                "name": f"llama-cpp-python {llama_cpp.__version__}",
                "set": label,
                "texts_s": n / median(times),
                "tokens_s": float("nan"),
            }
        )
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
        "word for word:\n\nLlamas are domesticated"
    ),
}
SPEC_GEN = 256


def bench_speculative(model: str, threads: int, repeats: int, draft_model: str | None) -> list[dict]:
    """Greedy generation of SPEC_GEN tokens per prompt: plain vs n-gram vs draft model. The
    engines take turns within each repeat, so a drift in machine speed hits them alike. Rates:
    whole call (prompt included) and decoding alone (after the first token: the prompt's
    evaluation is the same work for every engine)."""
    from llama_ffi.high import Llama
    from llama_ffi.high.speculative import SpecConfig, SpeculativeType

    configs = {
        "plain": None,
        "ngram-map-k": SpecConfig(type=SpeculativeType.NGRAM_MAP_K),
        "ngram-map-k4v": SpecConfig(type=SpeculativeType.NGRAM_MAP_K4V),
    }
    if draft_model:
        configs["draft"] = SpecConfig(type=SpeculativeType.DRAFT, draft_model_path=draft_model)
    engines = {
        name: Llama(model, n_ctx=1024, n_threads=threads, n_threads_batch=threads, progress=False, speculative=cfg)
        for name, cfg in configs.items()
    }
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
                    run = runs.setdefault(
                        (name, label), {"engine": name, "prompt": label, "rates": [], "decode_rates": []}
                    )
                    run["rates"].append(n / wall)
                    run["decode_rates"].append((n - 1) / (t0 + wall - first))
                    run["stats"], run["text"] = llm.last_speculative_stats, "".join(pieces)
    finally:
        for llm in engines.values():
            llm.close()
    rows = sorted(
        runs.values(), key=lambda r: (list(SPEC_PROMPTS).index(r["prompt"]), list(configs).index(r["engine"]))
    )
    for r in rows:  # speedups: medians of the ratios within a repeat (same machine speed)
        plain = runs[("plain", r["prompt"])]
        r["tps"] = median(r["rates"])
        r["speedup"] = median([a / b for a, b in zip(r["rates"], plain["rates"])])
        r["decode_tps"] = median(r["decode_rates"])
        r["decode_speedup"] = median([a / b for a, b in zip(r["decode_rates"], plain["decode_rates"])])
        r["identical"] = r["text"] == plain["text"]
    return rows


# llama.cpp's own n-gram speculation, for reference: llama-speculative-simple against a plain
# llama-completion run, same prompt, length, threads and context. Both print their decoding rate
# (prompt excluded); their whole-call times are not comparable with ours, so only decode figures.
NATIVE_SPEC_TYPES = {"llama.cpp ngram-map-k": "ngram-map-k", "llama.cpp ngram-map-k4v": "ngram-map-k4v"}
_NATIVE_COMMON = ("-n", str(SPEC_GEN), "--temp", "0", "-c", "1024")


def _native_stderr(binary: Path, model: str, threads: int, prompt_file: str, *extra: str) -> str:
    """What one llama.cpp example run prints on stderr (its timings)."""
    cmd = [
        str(binary),
        "-m",
        model,
        "-f",
        prompt_file,
        "-t",
        str(threads),
        "-tb",
        str(threads),
        *_NATIVE_COMMON,
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stderr


def _native_plain_rate(completion: Path, model: str, threads: int, prompt_file: str) -> float:
    err = _native_stderr(completion, model, threads, prompt_file, "-no-cnv")
    line = next(x for x in err.splitlines() if " eval time =" in x and "prompt eval" not in x)
    return float(re.search(r"([0-9.]+) tokens per second", line).group(1))


def native_spec_run(
    speculative: Path, model: str, threads: int, prompt_file: str, spec_type: str
) -> tuple[float, int, int]:
    """(decode tokens/s, drafted, accepted) of one llama-speculative-simple run."""
    err = _native_stderr(speculative, model, threads, prompt_file, "--spec-type", spec_type)
    rate = float(re.search(r"decoded +\d+ tokens in +[0-9.]+ seconds, speed: +([0-9.]+)", err).group(1))
    drafted = int(re.search(r"n_drafted += (\d+)", err).group(1))
    accepted = int(re.search(r"n_accept += (\d+)", err).group(1))
    return rate, drafted, accepted


def bench_speculative_native(tools: Path, model: str, threads: int, repeats: int) -> list[dict]:
    """Rows for llama.cpp's ngram-map-k(4v) per prompt: decode speedup over plain decoding
    (median of within-repeat ratios), drafted and accepted tokens."""
    import tempfile

    from llama_ffi.high.speculative import SpeculativeStats

    completion, speculative = tools / "llama-completion", tools / "llama-speculative-simple"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, prompt in SPEC_PROMPTS.items():
            prompt_file = str(Path(tmp) / "prompt.txt")
            Path(prompt_file).write_text(prompt)
            plain, runs = [], {name: [] for name in NATIVE_SPEC_TYPES}
            for _ in range(repeats):
                plain.append(_native_plain_rate(completion, model, threads, prompt_file))
                for name, spec_type in NATIVE_SPEC_TYPES.items():
                    runs[name].append(native_spec_run(speculative, model, threads, prompt_file, spec_type))
            for name, results in runs.items():
                _, drafted, accepted = results[-1]
                stats = SpeculativeStats(type=name, drafted_tokens=drafted, accepted_tokens=accepted)
                rows.append(
                    {
                        "engine": name,
                        "prompt": label,
                        "tps": None,
                        "speedup": None,
                        "decode_tps": median([r[0] for r in results]),
                        "decode_speedup": median([r[0] / p for r, p in zip(results, plain)]),
                        "stats": stats,
                        "identical": None,
                    }
                )
    return rows


def find_native_speculative(bench_binary: Path | None) -> Path | None:
    """The folder holding llama-completion and llama-speculative-simple next to llama-bench."""
    if bench_binary is None:
        return None
    tools = bench_binary.parent
    found = all((tools / name).is_file() for name in ("llama-completion", "llama-speculative-simple"))
    return tools if found else None


def speculative_table(rows: list[dict]) -> str:
    def fmt(value, spec: str) -> str:
        return "–" if value is None else format(value, spec)

    out = [
        "| prompt | engine | t/s | speedup | decode t/s | decode speedup | drafted | accepted | "
        "acceptance | mean accepted | same text |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        s = r["stats"]
        mean = f"{s.mean_accepted_length:.2f}" if s and s.draft_calls else "–"
        figures = (
            f"{s.drafted_tokens} | {s.accepted_tokens} | {s.acceptance_rate:.0%} | {mean}" if s else "– | – | – | –"
        )
        same = {True: "yes", False: "NO", None: "–"}[r["identical"]]
        out.append(
            f"| {r['prompt']} | {r['engine']} | {fmt(r['tps'], '.1f')} | {fmt(r['speedup'], '.2f')} | "
            f"{r['decode_tps']:.1f} | {r['decode_speedup']:.2f} | {figures} | {same} |"
        )
    return "\n".join(out)


def embedding_table(rows: list[dict]) -> str:
    out = ["| implementation | inputs | texts/s | tokens/s |", "|---|---|---:|---:|"]
    out += [f"| {r['name']} | {r['set']} | {r['texts_s']:.1f} | {r['tokens_s']:.0f} |" for r in rows]
    return "\n".join(out)


def table(rows: list[dict], native: dict | None) -> str:
    out = [
        "| implementation | load s | prompt t/s (256) | gen t/s (128) | gen vs native | "
        "overhead ms/token | peak RSS MB | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ratio = r.get("tg_ratio", r["tg_tps"] / native["tg_tps"] if native else float("nan"))
        out.append(
            f"| {r['name']} | {r['load_s']:.3f} | {r['pp_tps']:.1f} | {r['tg_tps']:.1f} | "
            f"{ratio:.3f} | {r['overhead_ms']:.3f} | {r['rss_mb']:.0f} | {r['note']} |"
        )
    return "\n".join(out)


def prompt_table(prompt: dict) -> str:
    """Prompt processing by size: llama-bench (warm), llama-ffi cold and warm, and the median of
    the back-to-back warm / native ratios."""
    out = [
        "| prompt tokens | llama-bench t/s | llama-ffi cold t/s | llama-ffi warm t/s | warm vs native | cold vs warm |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n, runs in prompt.items():
        ratio = median([w / b for w, b in zip(runs["warm"], runs["native"])]) if runs["native"] else float("nan")
        cold_cost = median([c / w for c, w in zip(runs["cold"], runs["warm"])])
        out.append(
            f"| {n} | {median(runs['native']):.1f} | {median(runs['cold']):.1f} | "
            f"{median(runs['warm']):.1f} | {ratio:.3f} | {cold_cost:.3f} |"
        )
    return "\n".join(out)


def _tools(bench_bin: Path | None) -> Path | None:
    """The folder of llama.cpp's tools: llama-bench's, else the reference build's."""
    reference = Path("build/llama.cpp-reference/bin")
    return bench_bin.parent if bench_bin else reference if reference.is_dir() else None


def run_summary(args: argparse.Namespace) -> int:
    from bench import summary

    tools = _tools(find_llama_bench(args.llama_bench))
    if tools is None:
        print("llama.cpp's tools not found (python -m tools.native_build --reference)", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    rows = summary.bench(args.model, args.threads, args.repeats, tools, args.embedding_model, args.against)
    heading = (
        f"{Path(args.model).name}, {args.threads} threads, {args.repeats} rounds, {os.cpu_count()} CPUs, "
        f"load {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print(f"## Summary: {summary.cpu_name()}\n\n{heading}\n\n{summary.summary_table(rows)}")
    if args.plots:
        for path in summary.write(rows, Path(args.plots), heading):
            print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "-m", "--model", help="GGUF model, or a registry name: smollm2-135m (the default, Q4_1) or gemma3-270m (Q4_K_M)"
    )
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--repeats", type=int, default=5)
    ap.add_argument("--llama-bench", help="path of llama.cpp's llama-bench")
    ap.add_argument(
        "-e", "--embedding-model", help="an embedding GGUF (e.g. MiniLM f16): adds the embedding throughput table"
    )
    ap.add_argument("--skip-generation", action="store_true")
    ap.add_argument("--mmproj", help="a multimodal projector: adds the image table against llama-mtmd-cli")
    ap.add_argument("--image", help="the image for --mmproj (default: llama.cpp's tools/mtmd/test-1.jpeg)")
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="add the parallel table: 1-16 sequences decoded together against llama-batched-bench",
    )
    ap.add_argument(
        "--stream-latency",
        action="store_true",
        help="add the streaming table: the gaps between a greedy stream's tokens from llama-ffi serve "
        "and llama-server (p50, p99, longest)",
    )
    ap.add_argument(
        "--server",
        action="store_true",
        help="add the server table: 1-16 concurrent HTTP clients "
        "of llama-ffi serve against llama-server -np N and the in-process engine",
    )
    ap.add_argument(
        "--concurrent",
        action="store_true",
        help="add the concurrent table: 1-16 callers on "
        "threads against llama-batched-bench and llama-server -np N with N HTTP clients",
    )
    ap.add_argument(
        "--rpc",
        action="store_true",
        help="add the RPC table: two local llama-ffi rpc-server "
        "workers against local decoding (and llama-bench --rpc through the same workers)",
    )
    ap.add_argument(
        "-s",
        "--speculative",
        action="store_true",
        help="add the speculative decoding table: plain vs n-gram (vs a draft model with --draft-model)",
    )
    ap.add_argument(
        "--speculative-public",
        action="store_true",
        help="add speculative decoding on public text (code editing, JSON extraction, summarization drawn by "
        "a fixed seed from Python's standard library and the JSONSchemaBench sample): n-gram defaults vs plain",
    )
    ap.add_argument(
        "--draft-model",
        help="a draft GGUF with the model's vocabulary (e.g. from python -m tools.draft_model MODEL OUT --layers 6)",
    )
    ap.add_argument(
        "--against",
        metavar="PYTHON",
        help="another Python with llama-ffi installed (e.g. a venv "
        "holding the portable wheel): adds a table of its prompt and generation speed against "
        "this Python's build, run in turns (with --summary: its rows against llama-bench)",
    )
    ap.add_argument(
        "--replicas",
        action="store_true",
        help="add the replicas table: two Ray Serve replicas of half the threads against one of all "
        "(pip install 'llama-ffi[ray]')",
    )
    ap.add_argument(
        "--router",
        action="store_true",
        help="add the router table: milliseconds a short request takes in router mode against one model alone",
    )
    ap.add_argument(
        "--soak",
        type=float,
        metavar="MINUTES",
        help="run the soak for MINUTES (one Llama under "
        "mixed concurrent load, every greedy answer checked) and print its report",
    )
    ap.add_argument(
        "--constrained",
        action="store_true",
        help="add the constrained table: json_schema generation against plain, 1 and 8 sequences, "
        "beside llama-server's json_schema on the same requests",
    )
    ap.add_argument(
        "--long",
        action="store_true",
        help="add the long-prompt table: a 12 k-token prompt's prefill (7.7 k on an 8 k model), decoding "
        "at that depth and an extending request, on llama-ffi serve and llama-server (flash attention and "
        "KV types too)",
    )
    ap.add_argument(
        "--thread-pool",
        nargs="+",
        metavar="LIB_DIR_OR_PYTHON",
        help="add the thread-pool table: llama-ffi on two or more builds of llama.cpp's libraries, each a folder "
        "of libraries or another Python with llama-ffi installed (e.g. OpenMP and "
        "ggml's own pool), alone, oversubscribed, beside a busy process and beside an idle Llama",
    )
    ap.add_argument(
        "--agents",
        action="store_true",
        help="add the agents table: Claude Code and Codex CLI (those installed) run their loops on llama-ffi "
        "serve; each request's prompt, cached share and time to first token (pip install 'llama-ffi[agents]')",
    )
    ap.add_argument(
        "--maskbench",
        metavar="DIR",
        help="JSONSchemaBench's maskbench/data (not shipped): schemas compiled, passing, invalid instances "
        "accepted and the mask's time per token, on the model's vocabulary",
    )
    ap.add_argument(
        "--summary",
        action="store_true",
        help="print only the summary: every figure users wait for beside llama.cpp's tools, min/median/max, "
        "with the load average (bench.summary)",
    )
    ap.add_argument(
        "--plots", metavar="DIR", help="with --summary: write its JSON and chart there (pip install 'llama-ffi[bench]')"
    )
    args = ap.parse_args(argv)
    from llama_ffi import registry

    if args.model is None or args.model in registry.BY_NAME:
        args.model = str(registry.fetch(registry.BY_NAME.get(args.model, registry.DEFAULT_MODEL)))
    print(
        f"model {args.model}, {args.threads} threads, {args.repeats} repeats, "
        f"{os.cpu_count()} CPUs, load average before: {os.getloadavg()}"
    )
    if args.summary:
        return run_summary(args)
    if args.embedding_model:
        erows = bench_embeddings_ffi(args.embedding_model, args.threads, args.repeats)
        erows += bench_embeddings_llama_cpp_python(args.embedding_model, args.threads, args.repeats)
        bench_bin = find_llama_bench(args.llama_bench)
        native_embedding = bench_bin.with_name("llama-embedding") if bench_bin else None
        if native_embedding and native_embedding.is_file():
            erows += bench_embeddings_native(native_embedding, args.embedding_model, args.threads)
        print(embedding_table(erows))
    if args.speculative_public:
        from bench import speculative_public

        print(speculative_public.table(speculative_public.bench(args.model, args.threads, args.repeats)))
    if args.speculative:
        rows = bench_speculative(args.model, args.threads, args.repeats, args.draft_model)
        tools = find_native_speculative(find_llama_bench(args.llama_bench))
        if tools:
            rows += bench_speculative_native(tools, args.model, args.threads, args.repeats)
            rows.sort(key=lambda r: list(SPEC_PROMPTS).index(r["prompt"]))  # stable: ours first
        else:
            print(
                "llama-speculative-simple not found: llama.cpp's own n-gram rows are left out "
                "(python -m tools.native_build --reference)",
                file=sys.stderr,
            )
        print(speculative_table(rows))
        from bench import speculative_callers

        repetitive = {k: v for k, v in SPEC_PROMPTS.items() if "repetitive" in k}
        print(
            speculative_callers.table(
                speculative_callers.bench(args.model, args.threads, args.repeats, repetitive, args.draft_model)
            )
        )
    if args.mmproj:
        from bench import mtmd as bench_mtmd

        image = args.image or str(Path("vendor/llama.cpp/tools/mtmd/test-1.jpeg"))
        bench_bin = find_llama_bench(args.llama_bench)
        cli = bench_bin.with_name("llama-mtmd-cli") if bench_bin else None
        cli = cli if cli and cli.is_file() else None
        print(bench_mtmd.mtmd_table(bench_mtmd.bench(args.model, args.mmproj, image, args.threads, args.repeats, cli)))
    if args.constrained:
        from bench import constrained

        bench_bin = find_llama_bench(args.llama_bench)
        print(
            constrained.constrained_table(constrained.bench(args.model, args.threads, args.repeats, _tools(bench_bin)))
        )
    if args.long:
        from bench import long_prompt

        bench_bin = find_llama_bench(args.llama_bench)
        rows = long_prompt.bench(args.model, args.threads, args.repeats, bench_bin and bench_bin.parent)
        print(long_prompt.long_prompt_table(rows))
    if args.thread_pool:
        from bench import thread_pool

        rows = thread_pool.bench(args.model, args.threads, args.repeats, [Path(d) for d in args.thread_pool])
        print(thread_pool.thread_pool_table(rows))
    if args.agents:
        from bench import agents

        print(agents.agents_table(agents.bench(args.model)))
    if args.maskbench:
        from bench import maskbench

        print(maskbench.table(maskbench.run(args.model, args.maskbench)))
        return 0
    if args.soak:
        from bench import soak

        result = soak.soak(args.model, args.soak, args.threads)
        print(soak.soak_table(result))
        return 0 if result["wrong"] == 0 and result["unexpected_errors"] == 0 else 1
    if args.replicas:
        from bench import replicas as bench_replicas

        print(bench_replicas.replicas_table(bench_replicas.bench(args.model, args.threads, args.repeats)))
    if args.router:
        from bench import router as bench_router

        print(bench_router.router_table(bench_router.bench(args.model, args.threads, args.repeats)))
    if args.stream_latency:
        from bench import stream_latency

        bench_bin = find_llama_bench(args.llama_bench)
        found = [bench_bin and bench_bin.with_name("llama-server"), Path("build/llama.cpp-reference/bin/llama-server")]
        native = next((path for path in found if path and path.is_file()), None)
        if native is None:
            print(
                "llama-server not found: its row is left out (python -m tools.native_build --reference)",
                file=sys.stderr,
            )
        rows = stream_latency.bench(args.model, args.threads, args.repeats, native)
        print(stream_latency.stream_latency_table(rows))
        return 0
    if args.server:
        from bench import server as bench_server

        bench_bin = find_llama_bench(args.llama_bench)
        if bench_bin is None:
            print(
                "llama-server not found: its column is left out (python -m tools.native_build --reference)",
                file=sys.stderr,
            )
        print(
            bench_server.server_table(
                bench_server.bench(args.model, args.threads, args.repeats, bench_bin and bench_bin.parent)
            )
        )
        return 0
    if args.concurrent:
        from bench import concurrent

        bench_bin = find_llama_bench(args.llama_bench)
        if bench_bin is None:
            print(
                "llama.cpp's tools not found: their columns are left out (python -m tools.native_build --reference)",
                file=sys.stderr,
            )
        rows, latency = concurrent.bench(args.model, args.threads, args.repeats, bench_bin and bench_bin.parent)
        print(concurrent.concurrent_table(rows, latency))
        return 0
    if args.parallel:
        from bench import parallel as bench_parallel

        bench_bin = find_llama_bench(args.llama_bench)
        batched = bench_bin.with_name("llama-batched-bench") if bench_bin else None
        if not (batched and batched.is_file()):
            print(
                "llama-batched-bench not found: its column is left out (python -m tools.native_build --reference)",
                file=sys.stderr,
            )
            batched = None
        print(bench_parallel.parallel_table(bench_parallel.bench(args.model, args.threads, args.repeats, batched)))
    if args.rpc:
        from bench import rpc as bench_rpc

        print(
            bench_rpc.rpc_table(
                bench_rpc.bench(args.model, args.threads, args.repeats, find_llama_bench(args.llama_bench))
            )
        )
    if args.against:
        from bench import builds

        print(builds.builds_table(builds.bench(args.model, args.threads, args.repeats, args.against)))
    if args.skip_generation:
        return 0
    binary = find_llama_bench(args.llama_bench)
    if not binary:
        print("llama-bench not found (build it: python -m tools.native_build --reference)", file=sys.stderr)
    ffi_row, native = bench_generation(args.model, args.threads, args.repeats, binary)
    rows = [native, ffi_row] if native else [ffi_row]
    other = bench_llama_cpp_python(args.model, args.threads, args.repeats)
    if other:
        rows.append(other)
    else:
        print("llama-cpp-python is not installed: its row is left out", file=sys.stderr)
    print(table(rows, native))
    print()
    print(prompt_table(ffi_row["prompt"]))
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
