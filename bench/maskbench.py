"""MaskBench (JSONSchemaBench's ``maskbench/data``: schemas with valid and invalid instances) run
through llama-ffi's constraint front door on a model's own vocabulary: how many schemas compile,
how many pass (every valid instance accepted and every invalid one rejected, token by token), how
many let an invalid instance through, and the time of one token's mask. The data set is not
shipped: ``python -m bench --maskbench DIR`` reads it from where you put it (a sample is, under
``tests/data/maskbench``).

llguidance writes an object's properties in the order the schema lists them (its documented
departure from JSON Schema, which lets a model write them in any order); a valid instance written
in another order is rejected for that alone. ``passing in schema order`` counts a schema passing
when its valid instances, rewritten in the schema's property order, are accepted.

Beside it, in the same run, llama.cpp's own grammar sampler: the time its ``apply`` takes over the
whole vocabulary for each token of the same valid instances, under llama.cpp's ``json.gbnf`` (any
JSON value: llama.cpp converts schemas in C++ that its API does not expose, and a schema's grammar
only adds rules to this one)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import llguidance
import numpy as np

from llama_ffi import ffi, lib
from llama_ffi.high import Llama
from llama_ffi.high.constraints import ConstraintError, json_schema_grammar, parsed_schema, rewrite
from llama_ffi.high.constraints import tokenizer as vocab_tokenizer
from llama_ffi.high.constraints.grammars import compiled_schema
from llama_ffi.high.constraints.property_order import in_schema_order


def instance_accepted(matcher: llguidance.LLMatcher, tokens: list[int], eog: int, mask, times: list[float]) -> bool:
    """Whether the matcher takes ``tokens`` one by one (each allowed by its mask) and may end."""
    for token in tokens:
        started = time.perf_counter()
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        times.append(time.perf_counter() - started)
        if not (int(mask[token >> 5]) >> (token & 31)) & 1 or not matcher.consume_token(token):
            return False
    return matcher.is_accepting() or matcher.consume_token(eog)


JSON_GBNF = Path("vendor/llama.cpp/grammars/json.gbnf")


def native_mask_times(llm, instances: list[str], limit: int = 200) -> list[float]:
    """Seconds of llama.cpp's grammar sampler ``apply`` (``json.gbnf``) over the whole vocabulary,
    one per token of the first ``limit`` instances it takes whole."""
    n_vocab = llm.n_vocab
    data = ffi.new("llama_token_data[]", n_vocab)
    view = np.frombuffer(ffi.buffer(data), dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
    fresh = np.zeros(n_vocab, dtype=view.dtype)
    fresh["id"] = np.arange(n_vocab)
    candidates = ffi.new("llama_token_data_array *", {"data": data, "size": n_vocab, "selected": -1})
    sampler = lib.llama_sampler_init_grammar(llm.loaded_model.vocab_ptr, JSON_GBNF.read_bytes(), b"root")
    times: list[float] = []
    try:
        for text in instances[:limit]:
            lib.llama_sampler_reset(sampler)
            for token in llm.tokenize(text, add_bos=False):
                np.copyto(view, fresh)
                candidates.size, candidates.selected, candidates.sorted = n_vocab, -1, False
                started = time.perf_counter()
                lib.llama_sampler_apply(sampler, candidates)
                times.append(time.perf_counter() - started)
                if view["logit"][token] == -np.inf:
                    break  # json.gbnf refuses it (its whitespace rule is tighter): the instance ends here
                lib.llama_sampler_accept(sampler, token)
    finally:
        lib.llama_sampler_free(sampler)
    return times


def cases(source: str | Path) -> list[dict]:
    """MaskBench's cases: a directory of its ``*.json`` files, or a JSON-lines sample of them."""
    source = Path(source)
    if source.is_file():
        return [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    found = []
    for path in sorted(source.glob("*.json")):
        try:
            found.append({"name": path.name, **json.loads(path.read_text())})
        except ValueError:
            continue  # one file of the set is not JSON
    return found


def run(model: str, source: str | Path, limit: int | None = None) -> dict:
    files = cases(source)[:limit]
    with Llama(model, vocab_only=True, progress=False) as llm:
        vocab = llm.loaded_model.vocab_ptr
        tokenizer = vocab_tokenizer.for_vocab(vocab)
        eog = llm.token_eos()
        mask = np.zeros((llm.n_vocab + 31) // 32, dtype=np.uint32)
        compiled = passing = in_order = with_tests = 0
        refusals: dict[str, int] = {}
        errors: list[str] = []
        let_through: list[str] = []
        rewrites: dict[str, int] = {}
        times: list[float] = []
        valid_texts: list[str] = []
        first_mask: list[float] = []
        for data in files:
            tests = data.get("tests") or []
            with_tests += bool(tests)
            try:
                started = time.perf_counter()
                grammar = json_schema_grammar(data["schema"])
                matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
                matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
                first_mask.append(time.perf_counter() - started)
                for used in rewritten_for(data["schema"]):
                    rewrites[used] = rewrites.get(used, 0) + 1
            except ConstraintError as error:
                reason = refusal_reason(str(error))
                refusals[reason] = refusals.get(reason, 0) + 1
                continue
            except Exception as error:  # a refusal must be a ConstraintError: anything else is a defect
                errors.append(f"{data.get('name')}: {type(error).__name__}: {error}"[:200])
                continue
            compiled += 1
            if not tests:
                continue
            right = ordered_right = True
            for test in tests:
                matcher.reset()
                text = json.dumps(test["data"], ensure_ascii=False)
                if test["valid"]:
                    valid_texts.append(text)
                accepted = instance_accepted(matcher, llm.tokenize(text, add_bos=False), eog, mask, times)
                right &= accepted == test["valid"]
                if accepted and not test["valid"]:
                    let_through.append(str(data.get("name")))
                if test["valid"] and not accepted:
                    matcher.reset()
                    text = json.dumps(in_schema_order(test["data"], data["schema"]), ensure_ascii=False)
                    accepted = instance_accepted(matcher, llm.tokenize(text, add_bos=False), eog, mask, times)
                ordered_right &= accepted == test["valid"]
            passing += right
            in_order += ordered_right
        native = np.asarray(native_mask_times(llm, valid_texts) if JSON_GBNF.is_file() else [np.nan]) * 1e3
        n_vocab = int(llm.n_vocab)
    ms = np.asarray(times) * 1e3 if times else np.zeros(1)
    first = np.asarray(first_mask) * 1e3 if first_mask else np.zeros(1)
    return {
        "schemas": len(files),
        "with_tests": with_tests,
        "compiled": compiled,
        "passing": passing,
        "passing_in_order": in_order,
        "rewrites": dict(sorted(rewrites.items(), key=lambda kv: -kv[1])),
        "invalid_accepted": len(let_through),
        "invalid_accepted_in": let_through,
        "mask_p50_ms": float(np.percentile(ms, 50)),
        "mask_p99_ms": float(np.percentile(ms, 99)),
        "first_mask_p50_ms": float(np.percentile(first, 50)),
        "native_mask_p50_ms": float(np.percentile(native, 50)),
        "native_mask_p99_ms": float(np.percentile(native, 99)),
        "n_vocab": n_vocab,
        "refusals": dict(sorted(refusals.items(), key=lambda kv: -kv[1])[:10]),
        "errors": errors,
    }


def refusal_reason(message: str) -> str:
    """A refusal's kind: its message without where it happened ("(at #/...)") or the text after
    llguidance's own first sentence."""
    message = re.sub(r" \(at #[^)]*\)", "", message).removeprefix("the JSON schema cannot be enforced: ")
    return message.split("\n")[0][:90]


def rewritten_for(schema) -> set[str]:
    """The rewrites a schema needed to compile (none if llguidance took it as it is)."""
    schema = parsed_schema(schema)
    try:
        compiled_schema(schema)
    except ConstraintError:
        return rewrite.rewritten(schema)[1]
    return set()


def table(result: dict) -> str:
    r = result
    share = 100 / max(r["with_tests"], 1)
    lines = [
        "| schemas | compile | passing (of those with tests) | passing in schema order | invalid accepted "
        "| mask p50 / p99 | first mask p50 | llama.cpp's grammar sampler (json.gbnf) p50 / p99 |",
        "|---|---|---|---|---|---|---|---|",
        f"| {r['schemas']} | {r['compiled']} ({100 * r['compiled'] / max(r['schemas'], 1):.1f} %) "
        f"| {r['passing']} of {r['with_tests']} ({r['passing'] * share:.1f} %) "
        f"| {r['passing_in_order']} ({r['passing_in_order'] * share:.1f} %) | {r['invalid_accepted']} "
        f"| {r['mask_p50_ms'] * 1e3:.0f} µs / {r['mask_p99_ms'] * 1e3:.0f} µs | {r['first_mask_p50_ms']:.1f} ms "
        f"| {r['native_mask_p50_ms']:.2f} ms / {r['native_mask_p99_ms']:.2f} ms |",
        "",
        f"vocabulary: {r['n_vocab']} tokens",
        "",
        "Schemas compiled through a rewrite, by rewrite: " + "; ".join(f"{k} ({v})" for k, v in r["rewrites"].items()),
        "",
        "Refusals, most frequent first: " + "; ".join(f"{k} ({v})" for k, v in r["refusals"].items()),
        "",
        f"Exceptions other than ConstraintError: {len(r.get('errors', []))}",
        *r.get("errors", [])[:10],
    ]
    return "\n".join(lines)


def write_sample(source: str | Path, out: str | Path, size: int = 240, max_chars: int = 2500) -> int:
    """A fixed sample for the tests, of small schemas with instances: half taken by llguidance as
    they are, a tenth still refused, the rest through the rewrites (each set of rewrites in turn)."""
    small = [c for c in cases(source) if c.get("tests") and len(json.dumps([c["schema"], c["tests"]])) <= max_chars]
    kinds: dict[str, list[dict]] = {}
    for case in small:
        try:
            json_schema_grammar(case["schema"])
        except ConstraintError:
            kinds.setdefault("refused", []).append(case)
            continue
        used = rewritten_for(case["schema"])
        kinds.setdefault(" + ".join(sorted(used)) if used else "as is", []).append(case)

    def spread(pool: list[dict], count: int) -> list[dict]:
        return pool[:: max(1, len(pool) // max(count, 1))][:count]

    chosen = spread(kinds.pop("as is"), size // 2) + spread(kinds.pop("refused"), size // 10)
    rewritten = [spread(pool, len(pool)) for pool in kinds.values()]
    while len(chosen) < size and any(rewritten):
        chosen += [pool.pop(0) for pool in rewritten if pool][: size - len(chosen)]
    lines = [json.dumps({k: c[k] for k in ("name", "schema", "tests")}, ensure_ascii=False) for c in chosen]
    Path(out).write_text("\n".join(sorted(lines)) + "\n", encoding="utf-8")
    return len(chosen)


if __name__ == "__main__":  # python -m bench.maskbench DATA_DIR OUT.jsonl: remake the tests' sample
    import sys

    print(write_sample(sys.argv[1], sys.argv[2]), "cases")
