"""A fixed sample of MaskBench (``tests/data/maskbench``: real-world schemas from JSONSchemaBench with
valid and invalid instances, MIT) through the constraint front door on SmolLM2's own vocabulary,
token by token as the sampler would see them: no invalid instance gets through, every valid one
does (in the schema's property order, llguidance's documented departure), refusals say what and
where, and each rewrite says of every instance what the original schema says (``jsonschema``)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import llguidance
import numpy as np
import pytest

from llama_ffi.high import Llama
from llama_ffi.high.constraints import ConstraintError, json_schema_grammar, rewrite
from llama_ffi.high.constraints import tokenizer as vocab_tokenizer
from llama_ffi.high.constraints.grammars import compiled_schema
from llama_ffi.high.constraints.property_order import in_schema_order

SAMPLE = Path(__file__).parent / "data" / "maskbench" / "sample.jsonl"
CASES = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def vocab(smollm2_path):
    with Llama(smollm2_path, vocab_only=True, progress=False) as llm:
        yield llm


def accepted(matcher: llguidance.LLMatcher, llm: Llama, value) -> bool:
    """Whether the constraint lets the value's tokens through, each allowed by the mask, and ends."""
    matcher.reset()
    mask = np.zeros((llm.n_vocab + 31) // 32, dtype=np.uint32)
    for token in llm.tokenize(json.dumps(value, ensure_ascii=False), add_bos=False):
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        if not (int(mask[token >> 5]) >> (token & 31)) & 1 or not matcher.consume_token(token):
            return False
    return matcher.is_accepting() or matcher.consume_token(llm.token_eos())


def test_the_sample_compiles_and_every_instance_is_judged_right(vocab):
    tokenizer = vocab_tokenizer.for_vocab(vocab.loaded_model.vocab_ptr)
    compiled, refused, wrong = 0, {}, []
    for case in CASES:
        try:
            grammar = json_schema_grammar(case["schema"])
        except ConstraintError as error:
            refused[case["name"]] = str(error)
            continue
        compiled += 1
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        for test in case["tests"]:
            verdict = accepted(matcher, vocab, test["data"])
            if test["valid"] and not verdict:
                verdict = accepted(matcher, vocab, in_schema_order(test["data"], case["schema"]))
            if verdict != test["valid"]:
                wrong.append((case["name"], test["valid"]))
    assert not wrong, wrong
    assert compiled >= 0.88 * len(CASES), refused
    for name, message in refused.items():
        assert "cannot be enforced" in message, (name, message)


def test_each_rewrite_judges_every_instance_as_the_original_does():
    checked = 0
    for case in CASES:
        schema = case["schema"]
        try:
            compiled_schema(schema)
            continue  # llguidance takes it as it is: nothing rewritten
        except ConstraintError:
            equivalent, used = rewrite.rewritten(schema)
        if not used:
            continue
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        # Formats asserted as llama-ffi enforces them, by today's names whatever the schema's draft
        # (MaskBench labelled its instances with the draft 2020-12 checker too).
        checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
        for test in case["tests"]:
            try:
                original = cls(schema, format_checker=checker).is_valid(test["data"])
            except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.RefResolutionError, ValueError):
                break  # the oracle cannot read this schema
            rewritten = cls(equivalent, format_checker=checker).is_valid(test["data"])
            assert rewritten == original, (case["name"], used, test)
            checked += 1
    assert checked >= 100
