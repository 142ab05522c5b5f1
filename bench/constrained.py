"""The benchmark's constrained table: generation under a JSON Schema against the same requests
without one, for 1 and for 8 concurrent sequences, on llama-ffi (in process, one ``Llama`` with
as many slots) and on llama-server from the pinned tree (HTTP, ``json_schema`` through llama.cpp's
own converter and grammar sampler). Each request is ``N_GEN`` greedy tokens after a pseudo-random
prompt, end-of-generation barred; the schema asks for more array items than ``N_GEN`` tokens can
hold, so a constrained request runs its whole length too. Plain and constrained runs alternate,
so both see the same machine speed; each figure is a median of tokens/s."""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import batched_llama, eog_ban, median
from bench.concurrent import N_GEN, HttpServer, prompts, run_threads

SEQUENCES = (1, 8)
# Records a model writes item by item: property names, a bounded string and a bounded integer per
# item, as a pydantic list model gives; 64 items are more than N_GEN tokens hold.
SCHEMA = {
    "type": "array",
    "minItems": 64,
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
    },
}


def in_process(llm, n: int, ban: dict, grammar) -> float:
    """Tokens/s of ``n`` callers at once, each ``N_GEN`` tokens (under ``grammar`` if given)."""
    llm.reset()
    counts: list[int] = []

    def one(prompt: list[int]) -> None:
        out = llm(prompt, max_tokens=N_GEN, temperature=0.0, logit_bias=ban, grammar=grammar)
        counts.append(out["usage"]["completion_tokens"])

    wall = run_threads([lambda p=p: one(p) for p in prompts(llm.n_vocab(), n)])
    if counts != [N_GEN] * n:
        raise RuntimeError(f"expected {N_GEN} tokens from each caller, got {counts}")
    return n * N_GEN / wall


def over_http(server: HttpServer, n: int, n_vocab: int, schema: dict | None) -> float:
    server.extra = {"cache_prompt": False, **({"json_schema": schema} if schema else {})}
    return n * N_GEN / run_threads([lambda p=p: server.complete(p) for p in prompts(n_vocab, n)])


def bench(model: str, threads: int, repeats: int, tools: Path | None) -> list[dict]:
    from llama_ffi.high import LlamaGrammar

    grammar = LlamaGrammar.from_json_schema(SCHEMA, verbose=False)
    native = tools / "llama-server" if tools and (tools / "llama-server").is_file() else None
    rows = []
    for n in SEQUENCES:
        row = {"model": Path(model).name, "sequences": n}
        with batched_llama(model, threads, n) as llm:
            ban, n_vocab = eog_ban(llm), llm.n_vocab()
            in_process(llm, n, ban, grammar)  # warm-up: the tokenizer for llguidance is built once
            plain, constrained = [], []
            for _ in range(repeats):
                plain.append(in_process(llm, n, ban, None))
                constrained.append(in_process(llm, n, ban, grammar))
        row.update(plain=median(plain), constrained=median(constrained))
        row.update(native_plain=float("nan"), native_constrained=float("nan"))
        if native:
            server = HttpServer([str(native), "--no-webui", "-kvu"], model, threads, n)
            try:
                over_http(server, 1, n_vocab, SCHEMA)  # warm-up
                plain, constrained = [], []
                for _ in range(repeats):
                    plain.append(over_http(server, n, n_vocab, None))
                    constrained.append(over_http(server, n, n_vocab, SCHEMA))
            finally:
                server.close()
            row.update(native_plain=median(plain), native_constrained=median(constrained))
        rows.append(row)
    return rows


def constrained_table(rows: list[dict]) -> str:
    out = [
        f"json_schema: {json.dumps(SCHEMA)}",
        "",
        "| model | sequences | llama-ffi plain t/s | llama-ffi json_schema t/s | llama-ffi json_schema / plain "
        "| llama-server plain t/s | llama-server json_schema t/s | llama-server json_schema / plain |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['model']} | {r['sequences']} | {r['plain']:.1f} | {r['constrained']:.1f} "
            f"| {r['constrained'] / r['plain']:.2f} | {r['native_plain']:.1f} | {r['native_constrained']:.1f} "
            f"| {r['native_constrained'] / r['native_plain']:.2f} |"
        )
    return "\n".join(out)
