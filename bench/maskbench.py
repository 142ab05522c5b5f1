"""MaskBench (JSONSchemaBench's ``maskbench/data``: schemas with valid and invalid instances) run
through llama-ffi's constraint front door on a model's own vocabulary: how many schemas compile,
how many pass (every valid instance accepted and every invalid one rejected, token by token), how
many let an invalid instance through, and the time of one token's mask. The data set is not
shipped: ``python -m bench --maskbench DIR`` reads it from where you put it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import llguidance
import numpy as np

from llama_ffi.high import Llama
from llama_ffi.high.constraints import ConstraintError, json_schema_grammar
from llama_ffi.high.constraints import tokenizer as vocab_tokenizer


def instance_accepted(matcher: llguidance.LLMatcher, tokens: list[int], eog: int, mask, times: list[float]) -> bool:
    """Whether the matcher takes ``tokens`` one by one (each allowed by its mask) and may end."""
    for token in tokens:
        started = time.perf_counter()
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        times.append(time.perf_counter() - started)
        if not (int(mask[token >> 5]) >> (token & 31)) & 1 or not matcher.consume_token(token):
            return False
    return matcher.is_accepting() or matcher.consume_token(eog)


def run(model: str, directory: str | Path, limit: int | None = None) -> dict:
    files = sorted(Path(directory).glob("*.json"))[:limit]
    with Llama(model, vocab_only=True, progress=False) as llm:
        vocab = llm.loaded_model.vocab_ptr
        tokenizer = vocab_tokenizer.for_vocab(vocab)
        eog = llm.token_eos()
        mask = np.zeros((llm.n_vocab + 31) // 32, dtype=np.uint32)
        compiled = passing = lets_invalid_through = with_tests = 0
        refusals: dict[str, int] = {}
        times: list[float] = []
        first_mask: list[float] = []
        for path in files:
            data = json.loads(path.read_text())
            tests = data.get("tests") or []
            with_tests += bool(tests)
            try:
                started = time.perf_counter()
                grammar = json_schema_grammar(data["schema"])
                matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
                matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
                first_mask.append(time.perf_counter() - started)
            except (ConstraintError, ValueError, TypeError) as error:
                reason = str(error).split(":")[-1].strip()[:60]
                refusals[reason] = refusals.get(reason, 0) + 1
                continue
            compiled += 1
            if not tests:
                continue
            right = True
            for test in tests:
                matcher.reset()
                text = json.dumps(test["data"], ensure_ascii=False)
                accepted = instance_accepted(matcher, llm.tokenize(text, add_bos=False), eog, mask, times)
                right &= accepted == test["valid"]
                lets_invalid_through += accepted and not test["valid"]
            passing += right
    ms = np.asarray(times) * 1e3 if times else np.zeros(1)
    first = np.asarray(first_mask) * 1e3 if first_mask else np.zeros(1)
    return {
        "schemas": len(files),
        "with_tests": with_tests,
        "compiled": compiled,
        "passing": passing,
        "invalid_accepted": lets_invalid_through,
        "mask_p50_ms": float(np.percentile(ms, 50)),
        "mask_p99_ms": float(np.percentile(ms, 99)),
        "first_mask_p50_ms": float(np.percentile(first, 50)),
        "refusals": dict(sorted(refusals.items(), key=lambda kv: -kv[1])[:10]),
    }


def table(result: dict) -> str:
    r = result
    lines = [
        "| schemas | compile | passing (of those with tests) | invalid accepted | mask p50 / p99 | first mask p50 |",
        "|---|---|---|---|---|---|",
        f"| {r['schemas']} | {r['compiled']} ({100 * r['compiled'] / max(r['schemas'], 1):.1f} %) "
        f"| {r['passing']} of {r['with_tests']} | {r['invalid_accepted']} "
        f"| {r['mask_p50_ms'] * 1e3:.0f} µs / {r['mask_p99_ms'] * 1e3:.0f} µs | {r['first_mask_p50_ms']:.1f} ms |",
        "",
        "Refusals, most frequent first: " + "; ".join(f"{k} ({v})" for k, v in r["refusals"].items()),
    ]
    return "\n".join(lines)
