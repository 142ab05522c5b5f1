"""The benchmark's summary: one table of what users wait for, llama-ffi beside llama.cpp's own tools
built from the same tree, on the same model, threads and work.

    python -m bench --summary [-r 3] [-e EMBEDDING.gguf] [--plots docs/img]

Rows (all rates, higher is better): generation, prompt processing (256 tokens), long prefill and
decode at that depth (``bench.long_prompt``: ``llama-ffi serve`` against llama-server), 8
concurrent sequences (against llama-batched-bench), 8 HTTP clients (``llama-ffi serve`` against
llama-server), n-gram speculative decoding on a copying prompt (against llama-speculative-simple),
json_schema generation (against llama-server's), embeddings (against llama-embedding, with ``-e``).
Each run of ours follows its counterpart's, so both see the same machine speed; a row gives each
side's min/median/max, the median of the paired ratios and the 1-minute load average when the row
was done. ``--plots DIR`` writes the rows as JSON and a chart of the ratios (matplotlib: ``pip
install 'llama-ffi[bench]'``), named after the CPU."""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import common, concurrent, constrained, long_prompt

N_SEQ = 8


@dataclass
class Row:
    """One measurement: our samples and the reference tool's, paired by index."""

    name: str
    unit: str
    reference: str
    ours: list[float] = field(default_factory=list)
    theirs: list[float] = field(default_factory=list)
    load: float = float("nan")

    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.ours, self.theirs) if b]

    def ratio(self) -> float:
        return common.median(self.ratios())


def paired(name: str, unit: str, reference: str, repeats: int, ours, theirs) -> Row:
    """``repeats`` rounds of ``theirs()`` then ``ours()``, each a rate."""
    row = Row(name, unit, reference)
    for _ in range(repeats):
        row.theirs.append(theirs())
        row.ours.append(ours())
    row.load = os.getloadavg()[0]
    return row


def single_sequence(model: str, threads: int, repeats: int, llama_bench: Path) -> list[Row]:
    n_prompt, n_gen = common.N_PROMPT, common.N_GEN
    return [
        paired(
            f"generation ({n_gen} tokens)",
            "t/s",
            "llama-bench",
            repeats,
            lambda: common.ffi_generation_test(model, threads)[0],
            lambda: common.native_test(llama_bench, model, threads, 0, n_gen),
        ),
        paired(
            f"prompt processing ({n_prompt} tokens)",
            "t/s",
            "llama-bench",
            repeats,
            lambda: common.ffi_prompt_test(model, threads, n_prompt)[2],
            lambda: common.native_test(llama_bench, model, threads, n_prompt, 0),
        ),
    ]


def other_build(model: str, threads: int, repeats: int, llama_bench: Path, python: str) -> list[Row]:
    """The single-sequence rows for another Python's llama-ffi (e.g. a venv holding the portable
    wheel), against the same llama-bench: the wheel beside the source build in one table."""
    from bench.builds import probe

    label = f"{Path(python).parent.parent.name}'s build"
    generation = Row(f"generation ({common.N_GEN} tokens), {label}", "t/s", "llama-bench")
    prompt = Row(f"prompt processing ({common.N_PROMPT} tokens), {label}", "t/s", "llama-bench")
    for _ in range(repeats):  # one probe measures both: a fresh process of that Python costs seconds
        generation.theirs.append(common.native_test(llama_bench, model, threads, 0, common.N_GEN))
        prompt.theirs.append(common.native_test(llama_bench, model, threads, common.N_PROMPT, 0))
        measured = probe(python, model, threads)
        generation.ours.append(measured["tg"])
        prompt.ours.append(measured["pp"])
    generation.load = prompt.load = os.getloadavg()[0]
    return [generation, prompt]


def long_prompts(model: str, threads: int, repeats: int, tools: Path) -> list[Row]:
    configs = (("llama-server", ()), ("llama-ffi", ()))
    theirs, ours = long_prompt.bench(model, threads, repeats, tools, configs)
    load = os.getloadavg()[0]
    names = {"prefill_tps": f"long prefill ({ours['n_long']} tokens)", "decode_tps": "decode at that depth"}
    return [Row(name, "t/s", "llama-server", ours[key], theirs[key], load) for key, name in names.items()]


def many_sequences(model: str, threads: int, repeats: int, tools: Path) -> Row:
    with common.batched_llama(model, threads, N_SEQ) as llm:
        ban = common.eog_ban(llm)
        concurrent.ours(llm, 2, ban)  # warm-up, as llama-batched-bench does
        tokens = N_SEQ * concurrent.N_GEN
        return paired(
            f"{N_SEQ} concurrent sequences",
            "t/s",
            "llama-batched-bench",
            repeats,
            lambda: tokens / concurrent.ours(llm, N_SEQ, ban),
            lambda: tokens / concurrent.batched_bench(tools / "llama-batched-bench", model, threads, N_SEQ),
        )


def http_clients(model: str, threads: int, repeats: int, tools: Path, n_vocab: int) -> Row:
    """``N_SEQ`` clients of ``/v1/completions`` at once; both servers up together, timed in turns,
    each prompt answered afresh."""
    servers = []
    try:
        for command in ([str(tools / "llama-server"), "--no-webui"], [sys.executable, "-m", "llama_ffi.server"]):
            server = concurrent.HttpServer([*command, "-kvu"], model, threads, N_SEQ, {"cache_prompt": False})
            servers.append(server)
            server.complete(concurrent.prompts(n_vocab, 1)[0])  # warm-up
        tokens = N_SEQ * concurrent.N_GEN

        def rate(server: concurrent.HttpServer) -> float:
            calls = [lambda p=p: server.complete(p) for p in concurrent.prompts(n_vocab, N_SEQ)]
            return tokens / concurrent.run_threads(calls)

        native, ffi = servers
        return paired(f"{N_SEQ} HTTP clients", "t/s", "llama-server", repeats, lambda: rate(ffi), lambda: rate(native))
    finally:
        for server in servers:
            server.close()


def speculative(model: str, threads: int, repeats: int, tools: Path) -> Row:
    """Decode rate with n-gram drafting (NGRAM_MAP_K) on the prompt that asks for a copy."""
    from bench.cli import SPEC_GEN, SPEC_PROMPTS, native_spec_run
    from llama_ffi.high import Llama
    from llama_ffi.high.speculative import SpecConfig, SpeculativeType

    prompt = SPEC_PROMPTS["copy (repetitive)"]
    config = SpecConfig(type=SpeculativeType.NGRAM_MAP_K)
    options = dict(n_ctx=1024, n_threads=threads, n_threads_batch=threads, progress=False)
    with Llama(model, speculative=config, **options) as llm, tempfile.TemporaryDirectory() as tmp:
        prompt_file = Path(tmp) / "prompt.txt"
        prompt_file.write_text(prompt)

        def ours() -> float:
            llm.reset()
            first, usage = None, {}
            for chunk in llm(prompt, max_tokens=SPEC_GEN, temperature=0, stream=True):
                first = first or time.perf_counter()
                usage = chunk.get("usage") or usage
            return (usage["completion_tokens"] - 1) / (time.perf_counter() - first)

        def theirs() -> float:
            binary = tools / "llama-speculative-simple"
            return native_spec_run(binary, model, threads, str(prompt_file), "ngram-map-k")[0]

        return paired("speculative n-gram decode (copy)", "t/s", "llama-speculative-simple", repeats, ours, theirs)


def json_schema(model: str, threads: int, repeats: int, tools: Path) -> Row:
    """One sequence under the constrained table's schema: in process against llama-server over HTTP
    (llama.cpp's generation with a grammar is reached through its server only)."""
    from llama_ffi.high import LlamaGrammar

    grammar = LlamaGrammar.from_json_schema(constrained.SCHEMA, verbose=False)
    with common.batched_llama(model, threads, 1) as llm:
        ban, n_vocab = common.eog_ban(llm), llm.n_vocab()
        constrained.in_process(llm, 1, ban, grammar)  # warm-up
        server = concurrent.HttpServer([str(tools / "llama-server"), "--no-webui"], model, threads, 1)
        try:
            constrained.over_http(server, 1, n_vocab, constrained.SCHEMA)  # warm-up
            return paired(
                "json_schema generation",
                "t/s",
                "llama-server",
                repeats,
                lambda: constrained.in_process(llm, 1, ban, grammar),
                lambda: constrained.over_http(server, 1, n_vocab, constrained.SCHEMA),
            )
        finally:
            server.close()


def embeddings(model: str, threads: int, repeats: int, tools: Path) -> Row:
    """Texts per second over 1,000 short texts, against llama-embedding (its model load subtracted)."""
    from bench.cli import embedding_seconds, sample_texts
    from llama_ffi.high import LlamaEmbedding

    texts = sample_texts(1000, 8)
    binary = tools / "llama-embedding"
    with LlamaEmbedding(model, n_threads=threads, n_threads_batch=threads) as emb:

        def ours() -> float:
            started = time.perf_counter()
            emb.embed(texts)
            return len(texts) / (time.perf_counter() - started)

        def theirs() -> float:
            load = embedding_seconds(binary, model, threads, ["x"])
            return len(texts) / max(embedding_seconds(binary, model, threads, texts) - load, 1e-9)

        return paired("embeddings (1000 short texts)", "texts/s", "llama-embedding", repeats, ours, theirs)


def bench(
    model: str, threads: int, repeats: int, tools: Path, embedding_model: str | None, other_python: str | None = None
) -> list[Row]:
    from llama_ffi.high import Llama

    with Llama(model, vocab_only=True, progress=False, verbose=False) as vocab:
        n_vocab = vocab.n_vocab()
    rows = single_sequence(model, threads, repeats, tools / "llama-bench")
    if other_python:
        rows += other_build(model, threads, repeats, tools / "llama-bench", other_python)
    rows += long_prompts(model, threads, repeats, tools)
    rows.append(many_sequences(model, threads, repeats, tools))
    rows.append(http_clients(model, threads, repeats, tools, n_vocab))
    rows.append(speculative(model, threads, repeats, tools))
    rows.append(json_schema(model, threads, repeats, tools))
    if embedding_model:
        rows.append(embeddings(embedding_model, threads, repeats, tools))
    return rows


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        return re.search(r"^model name\s*:\s*(.+)$", text, re.M).group(1).strip()
    except (OSError, AttributeError):
        return platform.processor() or platform.machine()


def summary_table(rows: list[Row]) -> str:
    def spread(values: list[float]) -> str:
        return f"{common.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"

    out = [
        "| measurement | unit | llama.cpp tool | llama.cpp: median (min–max) | llama-ffi: median (min–max) | "
        "llama-ffi / llama.cpp | load |",
        "|---|---|---|---|---|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r.name} | {r.unit} | {r.reference} | {spread(r.theirs)} | {spread(r.ours)} | "
            f"{r.ratio():.2f} ({min(r.ratios()):.2f}–{max(r.ratios()):.2f}) | {r.load:.2f} |"
        )
    return "\n".join(out)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def write(rows: list[Row], folder: Path, heading: str) -> list[Path]:
    """The rows as JSON and their ratios as a chart, both named after the CPU."""
    folder.mkdir(parents=True, exist_ok=True)
    cpu = cpu_name()
    stem = folder / f"summary-{slug(cpu)}"
    data = {"heading": heading, "cpu": cpu, "rows": [asdict(r) for r in rows]}
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    return [stem.with_suffix(".json"), plot(data, stem.with_suffix(".png"))]


def plot(data: dict, path: Path) -> Path:
    """Horizontal bars: each row's median ratio, whiskers from its lowest to its highest ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [Row(**r) for r in data["rows"]]
    medians = [r.ratio() for r in rows]
    low = [m - min(r.ratios()) for m, r in zip(medians, rows)]
    high = [max(r.ratios()) - m for m, r in zip(medians, rows)]
    labels = [f"{r.name}\nvs {r.reference}" for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.2))
    y = range(len(rows))
    # green: median at least even; grey: median below, but some round at least even (noise);
    # red: every round slower
    colors = [
        "#2e7d32" if m >= 1.0 else "#9e9e9e" if max(r.ratios()) >= 1.0 else "#c62828" for m, r in zip(medians, rows)
    ]
    ax.barh(y, medians, xerr=[low, high], color=colors, capsize=3)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("llama-ffi / llama.cpp (rate; > 1 is faster)")
    ax.set_title(f"{data['cpu']}\n{data['heading']}", fontsize=9)
    for i, m in enumerate(medians):
        ax.text(m + high[i] + 0.02, i, f"{m:.2f}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
