"""Speculative decoding on text nobody here picked: does ``SpecConfig()`` (the n-gram defaults) pay,
or at least cost nothing, on three tasks built from public text, each item drawn by a fixed seed?

- code editing: functions of Python's standard library (PSF licence; every install ships them),
  to be rewritten with type hints;
- JSON extraction: JSONSchemaBench's instances committed under ``tests/data/maskbench`` (MIT,
  their LICENSE beside them), given as ``key: value`` lines, to be returned as one JSON object;
- summarization: the standard library's longest module docstrings, to be summarized.

Each item is one greedy chat completion of ``N_GEN`` tokens at most, on a plain ``Llama`` and a
speculative one in turns (same machine speed for both); the figure per task is the median over its
items of the decode-rate ratio (time after the first token), with tokens drafted and accepted.
Speculation stays off by default unless every task gains ``GAIN`` (issue: >= 1.15x)."""

from __future__ import annotations

import ast
import json
import random
import sysconfig
import time
from pathlib import Path

from bench.common import median

N_ITEMS, N_GEN, SEED = 6, 192, 0
GAIN = 1.15
MASKBENCH_SAMPLE = Path(__file__).resolve().parent.parent / "tests" / "data" / "maskbench" / "sample.jsonl"


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))


def code_items(rng: random.Random) -> list[str]:
    """Functions of 8-40 lines from the standard library's top-level modules, drawn by ``rng``."""
    functions = []
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and 8 <= node.end_lineno - node.lineno + 1 <= 40:
                functions.append("\n".join(lines[node.lineno - 1 : node.end_lineno]))
    return [
        "Rewrite this Python function with type hints added to its parameters and return value. "
        f"Reply with the whole function only.\n\n```python\n{source}\n```"
        for source in rng.sample(functions, N_ITEMS)
    ]


def _flatten(value, prefix: str = "") -> list[str]:
    if isinstance(value, dict):
        return [line for k, v in value.items() for line in _flatten(v, f"{prefix}{k}.")]
    if isinstance(value, list):
        return [line for i, v in enumerate(value) for line in _flatten(v, f"{prefix}{i}.")]
    return [f"{prefix[:-1]}: {value}"]


def json_items(rng: random.Random) -> list[str]:
    """Valid instances of the committed JSONSchemaBench sample with at least 4 fields, as lines."""
    records = []
    for line in MASKBENCH_SAMPLE.read_text().splitlines():
        for test in json.loads(line)["tests"]:
            fields = _flatten(test["data"]) if isinstance(test["data"], dict) else []
            if test["valid"] and len(fields) >= 4:
                records.append("\n".join(fields))
    return [
        f"Return the following record as one JSON object (nested keys as nested objects).\n\n{record}"
        for record in rng.sample(records, min(N_ITEMS, len(records)))
    ]


def summary_items(rng: random.Random) -> list[str]:
    """The standard library's module docstrings of 800-4000 characters, drawn by ``rng``."""
    docs = []
    for path in _stdlib_files():
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError):
            continue
        if doc and 800 <= len(doc) <= 4000:
            docs.append(doc)
    return [f"Summarize the following text in three sentences.\n\n{doc}" for doc in rng.sample(docs, N_ITEMS)]


TASKS = {"code editing": code_items, "JSON extraction": json_items, "summarization": summary_items}


def _run(llm, prompt: str) -> tuple[float, int, str]:
    """(decode tokens/s after the first token, tokens, text) of one greedy streamed chat answer."""
    llm.reset()
    first, pieces, chunk = None, [], {}
    started = time.perf_counter()
    for chunk in llm.create_chat_completion(
        [{"role": "user", "content": prompt}], max_tokens=N_GEN, temperature=0, stream=True
    ):
        delta = chunk["choices"][0]["delta"].get("content")
        if delta:
            first = first or time.perf_counter()
            pieces.append(delta)
    end = time.perf_counter()
    n = chunk["usage"]["completion_tokens"]  # the last chunk's: a chunk may carry several tokens
    return (n - 1) / (end - (first or started)) if n > 1 else float("nan"), n, "".join(pieces)


def bench(model: str, threads: int, repeats: int) -> list[dict]:
    from llama_ffi.high import Llama
    from llama_ffi.high.speculative import SpecConfig

    rng = random.Random(SEED)
    items = {name: build(rng) for name, build in TASKS.items()}
    engines = {
        name: Llama(model, n_ctx=4096, n_threads=threads, n_threads_batch=threads, progress=False, speculative=cfg)
        for name, cfg in (("plain", None), ("n-gram defaults", SpecConfig()))
    }
    rows = []
    try:
        for task, prompts in items.items():
            ratios, drafted, accepted, same = [], 0, 0, 0
            for prompt in prompts:
                per_round = []
                for _ in range(repeats):
                    plain_rate, _, plain_text = _run(engines["plain"], prompt)
                    spec_rate, _, spec_text = _run(engines["n-gram defaults"], prompt)
                    per_round.append(spec_rate / plain_rate)
                stats = engines["n-gram defaults"].last_speculative_stats
                drafted += stats.drafted_tokens
                accepted += stats.accepted_tokens
                same += spec_text == plain_text
                ratios.append(median(per_round))
            rows.append(
                {
                    "task": task,
                    "items": len(prompts),
                    "speedup": median(ratios),
                    "range": (min(ratios), max(ratios)),
                    "drafted": drafted,
                    "accepted": accepted,
                    "identical": same,
                }
            )
    finally:
        for llm in engines.values():
            llm.close()
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        f"## Speculative decoding on public text (n-gram defaults vs plain; decode rate, {N_GEN} tokens at most)",
        "",
        "| task | items | speedup (median) | range | drafted | accepted | texts identical |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        low, high = r["range"]
        lines.append(
            f"| {r['task']} | {r['items']} | {r['speedup']:.2f}× | {low:.2f}–{high:.2f} | {r['drafted']} "
            f"| {r['accepted']} | {r['identical']}/{r['items']} |"
        )
    verdict = all(r["speedup"] >= GAIN for r in rows)
    lines += ["", f"Every task at least {GAIN}×: {'yes' if verdict else 'no'} (speculation is off by default)."]
    return "\n".join(lines)
