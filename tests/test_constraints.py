"""Constrained output through llguidance (``high.constraints``): llama.cpp's own JSON Schema cases
compile, what is generated under each constraint is what it allows (``jsonschema`` and ``re`` are the
oracles), refusals name the problem, and the sampler keeps llama.cpp's sampler contract."""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest
from test_json_schema import assert_validates, corpus

from llama_ffi import ffi, lib
from llama_ffi.high import Llama, LlamaGrammar
from llama_ffi.high.constraints import ConstraintError, json_schema_grammar


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, progress=False) as model:
        yield model


def corpus_schemas(tree):
    for status, name, text in corpus(tree):
        try:
            yield status, name, json.loads(text)
        except json.JSONDecodeError:
            continue  # some cases test the C++ parser on invalid JSON


def test_llama_cpp_s_schema_cases_compile(tree):
    """Every case llama.cpp converts compiles (llguidance's refusals rewritten: object-valued
    prefixItems read as items, as llama.cpp reads them; a look-ahead pattern as two patterns,
    where llama.cpp drops the pattern); every case llama.cpp refuses is refused, by name."""
    compiled, refused = [], {}
    for status, name, schema in corpus_schemas(tree):
        try:
            json_schema_grammar(schema)
        except ConstraintError as error:
            assert str(error), name
            refused[name] = str(error)
            continue
        assert status == "SUCCESS", f"{name}: llama.cpp refuses this schema, it compiled here"
        compiled.append(name)
    assert not {name for status, name, _ in corpus_schemas(tree) if status == "SUCCESS"} - set(compiled), refused
    assert len(compiled) >= 77


def test_llama_cpp_s_schema_cases_generate_valid_json(tree, llm):
    stopped, cut = [], []
    for _, name, schema in corpus_schemas(tree):
        try:
            grammar = LlamaGrammar.from_json_schema(schema)
        except ConstraintError:
            continue
        llm.reset()
        prompt = f"A JSON value for the schema {json.dumps(schema)[:200]}:\n"
        choice = llm(prompt, max_tokens=64, grammar=grammar, temperature=0.7, seed=1)["choices"][0]
        if choice["finish_reason"] != "stop":
            cut.append(name)
            continue
        assert_validates(name, choice["text"], schema)
        stopped.append(name)
    assert len(stopped) >= 40, (len(stopped), cut)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 3, "maximum": 7},
        {"type": "string", "pattern": "^[a-c]{2,4}$"},
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "maxLength": 5}], "items": False},
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"maxProperties": 1},
            ]
        },
        {"type": "integer", "exclusiveMinimum": 0, "maximum": 9},
    ],
)
def test_keywords_the_old_converter_refused_are_enforced(llm, schema):
    """Pydantic's Field(ge=, le=), constr(pattern=), tuples and allOf: every answer that ends by
    itself validates (a number may run on in digits: valid JSON, cut by max_tokens)."""
    stopped = 0
    for seed in (1, 2, 3):
        out = llm.create_chat_completion(
            [{"role": "user", "content": "Answer with a JSON value."}],
            max_tokens=60,
            temperature=1.0,
            seed=seed,
            response_format={"type": "json_schema", "json_schema": {"schema": schema}},
        )["choices"][0]
        if out["finish_reason"] == "stop":
            jsonschema.validate(json.loads(out["message"]["content"]), schema)
            stopped += 1
    assert stopped, "no answer ended by itself"


def test_regex_choice_and_lark_constrain_what_is_sampled(llm):
    pattern = r"[0-9]{3}-[a-z]{2,3}"
    lark = 'start: "(" NUM ("," NUM)* ")"\nNUM: /[0-9]{1,2}/\n'
    for seed in range(4):
        text = llm("Code:", grammar=LlamaGrammar.from_regex(pattern), max_tokens=12, temperature=1.0, seed=seed)
        assert re.fullmatch(pattern, text["choices"][0]["text"]), text
        text = llm("Answer:", grammar=LlamaGrammar.from_choice(["yes", "no"]), max_tokens=8, temperature=1.0, seed=seed)
        assert text["choices"][0]["text"] in ("yes", "no")
        text = llm("Numbers:", grammar=LlamaGrammar.from_lark(lark), max_tokens=24, temperature=1.0, seed=seed)
        choice = text["choices"][0]
        assert choice["finish_reason"] == "length" or re.fullmatch(r"\([0-9]{1,2}(,[0-9]{1,2})*\)", choice["text"])


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: LlamaGrammar.from_regex("(unclosed"), "unclosed group"),
        (lambda: LlamaGrammar.from_json_schema({"type": "array", "contains": {"const": 1}}), "contains"),
        (lambda: LlamaGrammar.from_json_schema("{not json"), "not valid JSON"),
        (lambda: LlamaGrammar.from_lark("start: missing_rule\n"), "missing_rule"),
    ],
)
def test_a_constraint_that_cannot_be_enforced_is_refused_by_name(make, words):
    with pytest.raises(ConstraintError, match=re.escape(words)):
        make()


def test_the_sampler_keeps_llama_cpp_s_contract(llm):
    """apply leaves only allowed candidates finite; accept advances; reset starts again; clone
    carries the state; free releases it — driven through llama.cpp's own functions."""
    vocab = llm.loaded_model.vocab_ptr
    n_vocab = lib.llama_vocab_n_tokens(vocab)
    smpl = LlamaGrammar.from_choice(["yes", "no"]).sampler(vocab)

    def allowed(sampler) -> set[int]:
        data = ffi.new("llama_token_data[]", n_vocab)
        for i in range(n_vocab):
            data[i].id, data[i].logit = i, 0.0
        arr = ffi.new("llama_token_data_array *", {"data": data, "size": n_vocab, "selected": -1, "sorted": False})
        lib.llama_sampler_apply(sampler, arr)
        logits = np.frombuffer(ffi.buffer(data, n_vocab * 12), dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
        return set(logits["id"][np.isfinite(logits["logit"])].tolist())

    try:
        first = allowed(smpl)
        texts = {llm.detokenize([t]).decode() for t in first}
        assert texts and all("yes".startswith(t) or "no".startswith(t) for t in texts), texts
        yes = llm.tokenize("yes", add_bos=False)
        for t in yes:
            lib.llama_sampler_accept(smpl, t)
        assert allowed(smpl) <= set(llm.tokenizer.end_of_generation())  # only the end is left
        twin = lib.llama_sampler_clone(smpl)
        assert allowed(twin) == allowed(smpl)
        lib.llama_sampler_reset(smpl)
        assert allowed(smpl) == first
        lib.llama_sampler_accept(smpl, llm.tokenize(" maybe", add_bos=False)[0])  # forced past the mask
        assert allowed(smpl) <= set(llm.tokenizer.end_of_generation())
        lib.llama_sampler_reset(smpl)  # a failed matcher starts again too
        assert allowed(smpl) == first
        lib.llama_sampler_free(twin)
    finally:
        lib.llama_sampler_free(smpl)


def test_greedy_runs_under_a_constraint_check_every_token(llm):
    """Greedy decoding under a constraint takes several tokens per C call (the argmax put to the
    constraint, the mask built only where it is refused): the text validates, and equals what the
    token-by-token path (a logits processor forces it) and the full candidate chain give."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}}, "required": ["name"]}
    grammar = LlamaGrammar.from_json_schema(schema)
    run = llm("A person as JSON:", grammar=grammar, max_tokens=48, temperature=0.0)["choices"][0]
    jsonschema.validate(json.loads(run["text"]), schema)
    keep = [lambda ids, logits: logits]
    stepped = llm("A person as JSON:", grammar=grammar, max_tokens=48, temperature=0.0, logits_processor=keep)
    assert stepped["choices"][0]["text"] == run["text"]
    # top_k 1 is greedy through llama.cpp's chain over every candidate (min_p 0 keeps the chain whole)
    chained = llm("A person as JSON:", grammar=grammar, max_tokens=48, temperature=1.0, top_k=1, min_p=0.0, seed=1)
    assert chained["choices"][0]["text"] == run["text"]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_constraint_that_allows_nothing_left_fails_clearly(llm, temperature):
    """The grammar is complete and allows only the end of generation, which a logit bias bars: a
    clear error, not a token the grammar refused."""
    ban = {t: -float("inf") for t in llm.tokenizer.end_of_generation()}
    with pytest.raises(Exception, match="grammar allows no token"):
        llm("Answer:", grammar=LlamaGrammar.from_choice(["yes"]), max_tokens=8, temperature=temperature, logit_bias=ban)
