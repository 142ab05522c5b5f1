"""Code written for llama-cpp-python runs after changing only the import.

The examples of llama-cpp-python's README and the calls LangChain's and LlamaIndex's llama.cpp
wrappers make, written as those users write them, against real models. The expected values
come from our own API on the same model (the port must mean the same), never hard-coded text.
"""

from __future__ import annotations

import json

import minilm
import numpy as np
import pytest

from llama_ffi import Llama, LlamaGrammar, testing  # was: from llama_cpp import Llama, LlamaGrammar
from llama_ffi.llama_speculative import LlamaPromptLookupDecoding, SpecConfig, SpeculativeType


@pytest.fixture(scope="module")
def llm(smollm2_path):
    # the README's constructor, GPU layers and seed included
    model = Llama(model_path=str(smollm2_path), n_gpu_layers=-1, seed=1337, n_ctx=2048, verbose=False)
    yield model
    model.close()


def test_readme_completion_with_echo_and_stop(llm):
    prompt = "Q: Name the planets in the solar system? A: "
    output = llm(prompt, max_tokens=32, stop=["Q:", "\n"], echo=True)
    assert set(output) >= {"id", "object", "created", "model", "choices", "usage"}
    assert output["object"] == "text_completion"
    text = output["choices"][0]["text"]
    assert text.startswith(prompt) and "\n" not in text[len(prompt) :]
    assert output["usage"]["total_tokens"] == output["usage"]["prompt_tokens"] + output["usage"]["completion_tokens"]


def test_size_methods_and_attributes(llm):
    assert llm.n_ctx() == 2048 == llm.n_ctx and llm.n_vocab() == 49152 and llm.n_embd() == 576
    assert llm.context_params.n_ctx == 2048 and llm.model_params.n_gpu_layers == -1
    tokens = llm.tokenize(b"Hello, world!")
    llm.reset()
    llm.eval(tokens)
    assert llm.n_tokens == len(tokens)
    assert llm.input_ids.dtype == np.intc and list(llm.input_ids[: llm.n_tokens]) == tokens
    assert llm.scores.shape == (len(tokens), 49152)
    np.testing.assert_array_equal(llm.scores[-1], llm.logits())
    assert llm.detokenize(tokens) == b"Hello, world!"
    assert (
        llm.detokenize(tokens[2:], prev_tokens=tokens[:2]) == llm.detokenize(tokens)[len(llm.detokenize(tokens[:2])) :]
    )


def test_generate_loop_from_the_docstring(llm):
    tokens = llm.tokenize(b"Hello, world!")
    out = []
    # ignore_eos: this generate ends at the end of generation, which a sampled first token may be
    for token in llm.generate(tokens, top_k=40, top_p=0.95, temp=1.0, repeat_penalty=1.0, ignore_eos=True):
        out.append(llm.detokenize([token]))
        if len(out) == 8:
            break
    assert len(out) == 8 and all(isinstance(b, bytes) for b in out)


def test_set_seed_makes_sampling_reproducible(llm):
    def run():
        llm.reset()
        return llm("Once upon a time", max_tokens=16, temperature=0.9)["choices"][0]["text"]

    llm.set_seed(42)
    first = run()
    llm.set_seed(42)
    assert run() == first
    llm.set_seed(43)
    assert run() != first


def test_sample_after_eval(llm):
    llm.reset()
    llm.eval(llm.tokenize(b"The capital of France is"))
    greedy = llm.sample(temp=0.0, top_k=40, top_p=0.95, repeat_penalty=1.0, penalize_nl=True, tfs_z=1.0)
    assert greedy == int(np.argmax(llm.logits()))


def test_save_and_load_state_with_llamastate(llm):
    llm.reset()
    llm.eval(llm.tokenize(b"Once upon a time"))
    state = llm.save_state()
    assert state.n_tokens == llm.n_tokens and state.llama_state_size == len(state.llama_state) > 0
    assert list(state.input_ids) == llm.tokens
    before = list(llm.tokens)
    llm("Something else entirely", max_tokens=4)
    llm.load_state(state)
    assert llm.tokens == before


def test_chat_completion_with_chat_format(smollm2_path):
    llm = Llama(model_path=str(smollm2_path), chat_format="chatml", n_ctx=1024, verbose=False)
    messages = [
        {"role": "system", "content": "You are an assistant who perfectly describes images."},
        {"role": "user", "content": "Describe this image in detail please."},
    ]
    out = llm.create_chat_completion(messages=messages, max_tokens=24, temperature=0)
    ours = llm.create_chat_completion(messages, max_tokens=24, temperature=0, chat_format="chatml")
    assert out["choices"][0]["message"] == ours["choices"][0]["message"]
    assert out["choices"][0]["message"]["role"] == "assistant"
    llm.close()


def test_json_mode_and_schema_as_in_the_readme(llm):
    messages = [
        {"role": "system", "content": "You are a helpful assistant that outputs in JSON."},
        {"role": "user", "content": "Who won the world series in 2020"},
    ]
    out = llm.create_chat_completion(
        messages=messages, response_format={"type": "json_object"}, temperature=0.7, max_tokens=200
    )
    if out["choices"][0]["finish_reason"] == "stop":
        json.loads(out["choices"][0]["message"]["content"])
    schema = {
        "type": "object",
        "properties": {"team_name": {"type": "string", "maxLength": 20}},
        "required": ["team_name"],
    }
    out = llm.create_chat_completion(
        messages=messages, temperature=0.7, max_tokens=64, response_format={"type": "json_object", "schema": schema}
    )
    assert "team_name" in json.loads(out["choices"][0]["message"]["content"])


def test_function_calling_with_the_legacy_functions(llm):
    function = {
        "name": "UserDetail",
        "parameters": {
            "type": "object",
            "title": "UserDetail",
            "properties": {
                "name": {"title": "Name", "type": "string", "maxLength": 12},
                "age": {"title": "Age", "type": "integer"},
            },
            "required": ["name", "age"],
        },
    }
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": "Extract Jason is 25 years old"}],
        functions=[function],
        function_call={"name": "UserDetail"},
        temperature=0,
        max_tokens=64,
    )
    call = out["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "UserDetail" and set(json.loads(call["arguments"])) == {"name", "age"}


def test_chat_logprobs_in_the_chat_shape(llm):
    out = llm.create_chat_completion(
        [{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0, logprobs=True, top_logprobs=2
    )
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"]
    assert all(len(c["top_logprobs"]) == 2 and c["logprob"] <= 0 for c in content)


def test_grammar_from_json_schema(llm):
    grammar = LlamaGrammar.from_json_schema(
        json.dumps({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3}), verbose=False
    )
    out = llm("Numbers:", grammar=grammar, max_tokens=32, temperature=0)["choices"][0]["text"]
    assert 2 <= len(json.loads(out)) <= 3


def test_prompt_lookup_decoding_as_draft_model(smollm2_path, llm):
    fast = Llama(
        model_path=str(smollm2_path),
        n_ctx=2048,
        verbose=False,
        draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10),
    )
    assert fast.speculative.kind == SpeculativeType.NGRAM_MAP_K and fast.speculative.ngram_size_m == 10
    prompt = "red green blue red green blue red green blue red green blue red green"
    text = fast(prompt, max_tokens=24, temperature=0)["choices"][0]["text"]
    testing.assert_same_or_near_tie(llm, prompt, text, 24)
    fast.close()


def test_jamepeng_spec_config_spelling(smollm2_path):
    config = SpecConfig(spec_type=SpeculativeType.from_str("ngram-map-k"), draft_n_max=4, draft_n_min=2)
    with Llama(model_path=str(smollm2_path), n_ctx=512, speculative=config, verbose=False) as fast:
        assert fast.speculative.kind == SpeculativeType.NGRAM_MAP_K
        assert fast("a b c a b c a b c", max_tokens=8, temperature=0)["usage"]["completion_tokens"] == 8


def test_embeddings_as_in_the_readme(tree):
    path = minilm.gguf_path(tree)
    llm = Llama(model_path=str(path), embedding=True, verbose=False)
    out = llm.create_embedding("Hello, world!")
    vector = out["data"][0]["embedding"]
    assert len(vector) == 384 and out["usage"]["prompt_tokens"] > 0
    both = llm.embed(["Hello, world!", "Goodbye, world!"])
    assert np.allclose(both[0], vector, atol=1e-5)  # not normalised by default, as there
    unit = llm.embed("Hello, world!", normalize=True)
    assert np.linalg.norm(unit) == pytest.approx(1.0, abs=1e-5)
    assert np.allclose(unit, np.asarray(vector) / np.linalg.norm(vector), atol=1e-5)
    llm.close()


# ---- the wrappers: LangChain's LlamaCpp / LlamaCppEmbeddings, LlamaIndex's LlamaCPP ----------------


def test_langchain_llamacpp_construction_and_calls(smollm2_path):
    # langchain_community.llms.LlamaCpp: its model_param_names at their defaults
    client = Llama(
        str(smollm2_path),
        rope_freq_scale=0.0,
        rope_freq_base=0.0,
        lora_path=None,
        lora_base=None,
        n_ctx=512,
        n_parts=-1,
        seed=-1,
        f16_kv=True,
        logits_all=False,
        vocab_only=False,
        use_mlock=False,
        n_threads=None,
        n_batch=8,
        use_mmap=True,
        last_n_tokens_size=64,
        verbose=False,
    )
    params = dict(
        suffix=None,
        max_tokens=16,
        temperature=0.8,
        top_p=0.95,
        logprobs=None,
        echo=False,
        stop=[],
        repeat_penalty=1.1,
        top_k=40,
    )
    result = client(prompt="This is a prompt.", **params)
    # seed=-1 samples at random: the first token may end the text, so only the shape is fixed
    assert isinstance(result["choices"][0]["text"], str) and result["usage"]["completion_tokens"] <= 16
    assert result["choices"][0]["finish_reason"] in ("stop", "length")
    chunks = list(client(prompt="This is a prompt.", stream=True, **params))
    assert all("logprobs" in c["choices"][0] for c in chunks) and chunks[-1]["choices"][0]["finish_reason"]
    assert len(client.tokenize(b"This is a prompt.")) > 3
    client.close()


def test_langchain_embeddings_and_llamaindex_metadata(tree, smollm2_path):
    emb = Llama(
        str(minilm.gguf_path(tree)),
        n_ctx=512,
        n_parts=-1,
        seed=-1,
        f16_kv=True,
        logits_all=False,
        vocab_only=False,
        use_mlock=False,
        n_threads=None,
        n_batch=512,
        n_gpu_layers=None,
        verbose=False,
        embedding=True,
    )
    data = emb.create_embedding(["first text", "second text"])["data"]
    assert [len(list(map(float, e["embedding"]))) for e in data] == [384, 384]
    assert len(emb.embed("query")) == 384
    emb.close()
    # llama_index.llms.llama_cpp.LlamaCPP: Llama(model_path=..., **model_kwargs), metadata from
    # context_params.n_ctx, completion by keyword
    llm = Llama(model_path=str(smollm2_path), **{"n_ctx": 1024, "verbose": False, "n_gpu_layers": 0})
    assert llm.context_params.n_ctx == 1024
    out = llm(prompt="Hello", temperature=0.1, max_tokens=8, stop=[])
    assert out["choices"][0]["text"]
    streamed = "".join(c["choices"][0]["text"] for c in llm(prompt="Hello", temperature=0.0, max_tokens=8, stream=True))
    llm.reset()
    assert streamed == llm(prompt="Hello", temperature=0.0, max_tokens=8)["choices"][0]["text"]
    llm.close()


def test_langchain_device_parameter(smollm2_path):
    """LangChain 0.4's LlamaCppEmbeddings passes device=None; a ggml device name selects that device
    ("CPU": nothing offloaded, as llama.cpp's --device none)."""
    with Llama(str(smollm2_path), device=None, n_ctx=256, progress=False) as default:
        want = default("The capital of France is", max_tokens=8, temperature=0)["choices"][0]["text"]
    with Llama(str(smollm2_path), device="CPU", n_gpu_layers=-1, n_ctx=256, progress=False) as cpu:
        assert cpu("The capital of France is", max_tokens=8, temperature=0)["choices"][0]["text"] == want
    with pytest.raises(ValueError, match=r"unknown device 'Vulkan7'; this build has: .*CPU"):
        Llama(str(smollm2_path), device="Vulkan7")
    with pytest.raises(TypeError, match="device must be a ggml device name"):
        Llama(str(smollm2_path), device=0)
    with pytest.raises(ValueError, match="pass either device or rpc_servers"):
        Llama(str(smollm2_path), device="CPU", rpc_servers="127.0.0.1:1")


# ---- what is refused names itself and the alternative -------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lora_base="base.gguf"), r"lora_base='base.gguf' is not supported"),
        (dict(n_parts=2), r"n_parts=2 is not supported: model files are no longer split"),
        (dict(tokenizer=object()), r"tokenizer is not supported"),
        (dict(spm_infill="yes"), r"spm_infill must be a bool"),
        (dict(draft_model=object()), r"draft_model must be a llama_ffi.llama_speculative.LlamaPromptLookupDecoding"),
        (dict(no_such_option=1), r"unexpected keyword argument\(s\): no_such_option"),
    ],
)
def test_unsupported_constructor_parameters_name_the_alternative(smollm2_path, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        Llama(model_path=str(smollm2_path), **kwargs)


def test_unsupported_call_parameters_name_the_alternative(llm):
    with pytest.raises(ValueError, match="suffix= needs a model with fill-in-the-middle tokens"):
        llm("def f(", suffix="return 1", max_tokens=4)  # SmolLM2 has no FIM tokens (tests/test_infill.py)
    with pytest.raises(ValueError, match="penalize_nl=False is not supported"):
        llm("x", max_tokens=2, penalize_nl=False)
    with pytest.raises(TypeError, match="set_cache takes a LlamaRAMCache, a LlamaDiskCache or None"):
        llm.set_cache(object())
    llm.set_cache(None)
    with pytest.raises(ValueError, match="idx=0: only the last evaluated position"):
        llm.reset()
        llm.eval(llm.tokenize(b"Hello world"))
        llm.sample(idx=0)


def test_logits_all_keeps_every_row_of_scores(smollm2_path):
    with (
        Llama(model_path=str(smollm2_path), n_ctx=256, logits_all=True, verbose=False) as full,
        Llama(model_path=str(smollm2_path), n_ctx=256, verbose=False) as plain,
    ):
        tokens = full.tokenize(b"The quick brown fox jumps over the lazy dog")
        full.eval(tokens)
        rows = full.scores
        assert rows.shape == (len(tokens), full.n_vocab()) and np.all(rows.any(axis=1))
        for i in (0, len(tokens) // 2, len(tokens) - 1):  # each row is that prefix's next-token logits
            plain.reset()
            plain.eval(tokens[: i + 1])
            np.testing.assert_allclose(rows[i], plain.logits(), atol=2e-2 + 2 * testing.logits_gap(plain))
        generated = list(full.generate(tokens, max_tokens=4, temperature=0))
        assert full.scores.shape[0] == full.n_tokens == len(tokens) + len(generated) - 1
        assert int(np.argmax(full.scores[-1])) == generated[-1]


def test_warm_up_at_load_leaves_an_empty_cache(smollm2_path, llm):
    with Llama(model_path=str(smollm2_path), n_ctx=2048, warmup=True, verbose=False) as warm:
        assert warm.n_tokens == 0 and warm.n_evaluated == 0
        assert warm.context.seq_pos_max(0) == -1
        llm.reset()
        want = llm("Once upon a time", max_tokens=12, temperature=0)["choices"][0]["text"]
        assert warm("Once upon a time", max_tokens=12, temperature=0)["choices"][0]["text"] == want
