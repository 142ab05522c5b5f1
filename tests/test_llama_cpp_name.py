"""llama-ffi under llama-cpp-python's name: ``install_as_llama_cpp()`` and ``LLAMA_FFI_AS_LLAMA_CPP``,
every public name of llama-cpp-python (tests/data/llama_cpp_python_names.json) provided or refused
by name, and the semantics its users rely on (the seed chain, ``ignore_eos``, caches that store
after a completion, formatters, typed openai results). Expected values come from llama-ffi's own
API on the same model, never hard-coded text."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from llama_ffi.high import Llama, LlamaRAMCache
from llama_ffi.llama_cpp import llama_chat_format, llama_types
from llama_ffi.llama_cpp.llama import LogitsProcessorList, StoppingCriteriaList
from llama_ffi.llama_cpp.not_provided import NotProvidedError

REPO = Path(__file__).resolve().parent.parent
NAMES = json.loads((Path(__file__).parent / "data" / "llama_cpp_python_names.json").read_text())


def run_python(code: str, env: dict | None = None, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


# ---- the name --------------------------------------------------------------------------------------
def test_install_lends_the_package_and_every_submodule():
    done = run_python("""
        import llama_ffi
        assert llama_ffi.install_as_llama_cpp() is True
        import llama_cpp, llama_cpp.llama_types, llama_cpp.llama_chat_format
        from llama_cpp.llama import Llama
        from llama_cpp import LogitsProcessorList, ChatCompletionMessageToolCall, LLAMA_POOLING_TYPE_MEAN
        import llama_ffi.llama_cpp as real
        assert llama_cpp is real and llama_cpp.llama_types is real.llama_types and Llama is llama_ffi.Llama
        assert llama_cpp.__spec__.name == "llama_ffi.llama_cpp"  # the module keeps its own spec
        assert LLAMA_POOLING_TYPE_MEAN == llama_ffi.lib.LLAMA_POOLING_TYPE_MEAN
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_environment_switch_lends_the_name_to_programs_one_cannot_edit():
    code = "import llama_cpp; print(llama_cpp.__name__)"  # the installed start-up hook (a .pth) lends it
    lent = run_python(code, {"LLAMA_FFI_AS_LLAMA_CPP": "1"})
    assert lent.returncode == 0 and lent.stdout.strip() == "llama_ffi.llama_cpp", lent.stderr[-2000:]
    plain = run_python(code, {"LLAMA_FFI_AS_LLAMA_CPP": "0"})
    assert plain.returncode != 0 and "No module named 'llama_cpp'" in plain.stderr


def test_a_real_llama_cpp_python_is_never_shadowed_silently(tmp_path):
    (tmp_path / "llama_cpp").mkdir()
    (tmp_path / "llama_cpp" / "__init__.py").write_text("REAL = True\n")
    done = run_python(
        """
        import warnings, llama_ffi
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert llama_ffi.install_as_llama_cpp() is False
        assert "llama-cpp-python is installed" in str(caught[0].message)
        import llama_cpp
        assert llama_cpp.REAL
        del __import__("sys").modules["llama_cpp"]
        assert llama_ffi.install_as_llama_cpp(force=True) is True
        import llama_cpp
        assert llama_cpp.__name__ == "llama_ffi.llama_cpp"
        print("ok")
        """,
        {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("module", sorted(NAMES["modules"]))
def test_every_public_name_is_provided_or_refused_by_name(module):
    """A name llama-cpp-python defines either exists here or raises NotProvidedError naming it and
    what to use; a plain AttributeError (a name nobody decided about) fails."""
    where = "llama_ffi.llama_cpp" + (f".{module}" if module else "")
    mod = importlib.import_module(where)
    undecided = []
    for name in NAMES["modules"][module]:
        try:
            getattr(mod, name)
        except NotProvidedError as refusal:
            assert name in str(refusal) and ":" in str(refusal)
        except AttributeError:
            undecided.append(name)
    assert not undecided, f"{where}: neither provided nor refused: {undecided}"


def test_a_c_name_the_api_no_longer_has_is_refused_by_name():
    import llama_ffi.llama_cpp as llama_cpp

    with pytest.raises(NotProvidedError, match="LLAMA_VOCAB_PRE_TYPE_GPT2 is not in the C API"):
        llama_cpp.LLAMA_VOCAB_PRE_TYPE_GPT2  # noqa: B018 - llama.cpp's own vocab header, not llama.h
    assert not hasattr(llama_cpp, "no_such_name_anywhere")


# ---- semantics --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=1024, n_threads=2, seed=42, progress=False) as model:
        yield model


def sample_texts(llm, n: int) -> list[str]:
    return [llm("Tell me a story:", max_tokens=12, temperature=1.0)["choices"][0]["text"] for _ in range(n)]


def test_the_seed_chain_differs_call_after_call_repeats_across_runs_and_is_restored(llm):
    llm.set_seed(42)
    first = sample_texts(llm, 3)
    assert len(set(first)) > 1  # unseeded calls draw new seeds from the chain
    llm.set_seed(42)
    assert sample_texts(llm, 3) == first  # the same chain, the same samples
    llm.set_seed(42)
    sample_texts(llm, 1)
    state = llm.save_state()
    after = sample_texts(llm, 2)
    llm.load_state(state)  # the chain stands where it stood at save_state
    assert sample_texts(llm, 2) == after
    seeded = llm("Tell me a story:", max_tokens=12, temperature=1.0, seed=7)["choices"][0]["text"]
    assert llm("Tell me a story:", max_tokens=12, temperature=1.0, seed=7)["choices"][0]["text"] == seeded


def test_ignore_eos_generates_past_the_end_of_generation(llm):
    eos = llm.token_eos()
    forced_end = {eos: 100.0}  # the model would end at once
    ended = llm("Hi", max_tokens=6, temperature=0, logit_bias=forced_end)["choices"][0]
    assert ended["finish_reason"] == "stop" and ended["text"] == ""
    for call in (llm.create_completion, llm.__call__):
        kept = call("Hi", max_tokens=6, temperature=0, logit_bias=forced_end, ignore_eos=True)
        assert kept["choices"][0]["finish_reason"] == "length" and kept["usage"]["completion_tokens"] == 6
    with pytest.raises(TypeError, match="ignore_eos must be a bool"):
        llm("Hi", max_tokens=2, ignore_eos="yes")


STORY = "Once upon a time, in a village by the sea, there lived an old fisherman and his three daughters."


def test_a_shared_cache_is_filled_after_a_completion_and_at_close(smollm2_path):
    cache = LlamaRAMCache(capacity_bytes=1 << 28)
    with Llama(smollm2_path, n_ctx=512, n_threads=2, progress=False) as writer:
        writer.set_cache(cache)
        want = writer(STORY, max_tokens=4, temperature=0)["choices"][0]["text"]
        assert len(cache) == 1  # stored when the completion ended, not when a slot was taken
        other = writer.tokenize("A different prompt that is long enough to be stored, surely.")
        writer.eval(other)
    assert len(cache) == 2  # what eval left in the cache was stored at close()
    with Llama(smollm2_path, n_ctx=512, n_threads=2, progress=False) as reader:
        reader.set_cache(cache)
        before = reader.engine.status().stats.prompt_tokens
        got = reader(STORY, max_tokens=4, temperature=0)["choices"][0]["text"]
        assert reader.engine.status().stats.prompt_tokens - before <= 1  # a hit: the prompt came from the cache
    assert got == want


def test_tokenizer_is_also_llama_cpp_pythons_method(llm):
    tokenizer = llm.tokenizer()
    ids = tokenizer.encode("Hello world", add_bos=False)
    assert ids == llm.tokenize(b"Hello world", add_bos=False)
    assert tokenizer.decode(ids) == "Hello world" and tokenizer.detokenize(ids) == b"Hello world"
    assert llm.tokenizer.tokenize(b"Hello world", False) == ids  # the attribute keeps working


def test_processor_and_criteria_lists_apply_in_order(llm):
    target = llm.tokenize(b" banana", add_bos=False)[0]

    def boost(input_ids, scores):
        scores[target] += 100.0
        return scores

    def seen(input_ids, logits):
        return int(input_ids[-1]) == target

    out = llm(
        "My favourite fruit is",
        max_tokens=8,
        temperature=0,
        logits_processor=LogitsProcessorList([boost]),
        stopping_criteria=StoppingCriteriaList([seen]),
    )
    assert out["choices"][0]["text"].startswith(" banana") and out["usage"]["completion_tokens"] == 1


def test_jinja2_formatter_renders_as_the_models_own_template(llm):
    from llama_ffi.high.chat.completion import chat_prompt

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    formatter = llama_chat_format.Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token="<|im_end|>",
        bos_token="<|im_start|>",
        stop_token_ids=[llm.token_eos()],
    )
    response = formatter(messages=messages)
    assert response.prompt == chat_prompt(llm, messages)[0]
    assert response.stop == ["<|im_end|>"]
    assert response.stopping_criteria(np.array([1, llm.token_eos()]), None) is True
    handled = llm.create_chat_completion(
        messages, chat_handler=formatter.to_chat_handler(), max_tokens=8, temperature=0
    )
    own = llm.create_chat_completion(messages, max_tokens=8, temperature=0)
    assert handled["choices"][0]["message"]["content"] == own["choices"][0]["message"]["content"]


def test_a_registered_chat_format_is_used_by_name(smollm2_path):
    calls = []

    @llama_chat_format.register_chat_format("test-plain")
    def plain(messages, **kwargs):
        calls.append(messages)
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        return llama_chat_format.ChatFormatterResponse(prompt=text, stop=["\n"])

    with Llama(smollm2_path, n_ctx=512, n_threads=2, chat_format="test-plain", progress=False) as model:
        reply = model.create_chat_completion([{"role": "user", "content": "Say hi"}], max_tokens=16, temperature=0)
        want = model("user: Say hi\nassistant:", max_tokens=16, temperature=0, stop=["\n"])["choices"][0]["text"]
    assert calls and reply["choices"][0]["message"]["content"] == want


def test_format_functions_match_the_templates_they_name():
    import jinja2

    messages = [
        llama_types.ChatCompletionRequestUserMessage(role="user", content="Instruction"),
        llama_types.ChatCompletionRequestAssistantMessage(role="assistant", content="Model answer"),
        llama_types.ChatCompletionRequestUserMessage(role="user", content="Follow-up"),
    ]
    reference = jinja2.Template(llama_chat_format.MISTRAL_INSTRUCT_CHAT_TEMPLATE).render(
        messages=messages, bos_token="<s>", eos_token="</s>"
    )
    assert "<s>" + llama_chat_format.format_mistral_instruct(messages=messages).prompt == reference
    chatml = llama_chat_format.format_chatml(messages=messages)
    assert chatml.prompt.endswith("<|im_start|>assistant\n") and chatml.stop == "<|im_end|>"
    with pytest.raises(NotProvidedError, match="format_alpaca"):
        llama_chat_format.format_alpaca  # noqa: B018


def test_hf_tokenizer_config_formatter_appends_an_empty_assistant_turn():
    config = {
        "bos_token": {"content": "<s>"},
        "eos_token": "</s>",
        "chat_template": llama_chat_format.MISTRAL_INSTRUCT_CHAT_TEMPLATE,
    }
    formatter = llama_chat_format.hf_tokenizer_config_to_chat_formatter(config)
    response = formatter(messages=[{"role": "user", "content": "Hello"}])
    assert response.prompt == "<s>[INST] Hello [/INST]</s>" and response.added_special


def test_openai_v1_results_are_the_openai_packages_objects(llm):
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    messages = [{"role": "user", "content": "Hi"}]
    whole = llm.create_chat_completion_openai_v1(messages, max_tokens=6, temperature=0)
    assert isinstance(whole, ChatCompletion)
    assert (
        whole.choices[0].message.content
        == llm.create_chat_completion(messages, max_tokens=6, temperature=0)["choices"][0]["message"]["content"]
    )
    chunks = list(llm.create_chat_completion_openai_v1(messages, max_tokens=6, temperature=0, stream=True))
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content


def test_prompt_lookup_candidates():
    from llama_ffi.llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    find = LlamaPromptLookupDecoding.find_candidate_pred_tokens
    assert find(np.array([5, 1, 2, 9, 4, 1, 2]), max_ngram_size=2, num_pred_tokens=2).tolist() == [9, 4]
    assert find(np.array([5, 1, 2, 9, 4, 7, 2]), max_ngram_size=2, num_pred_tokens=3).tolist() == [9, 4, 7]
    assert find(np.array([1, 2, 3, 4]), max_ngram_size=3, num_pred_tokens=2).tolist() == []


def test_a_recurrent_models_state_reloads_and_continues(tmp_path):
    """A recurrent state cannot give back its last position: after load_state the next request
    evaluates its prompt again, and answers as a fresh Llama does (it failed its decode before)."""
    from tiny_mamba import write_gguf

    path = write_gguf(tmp_path / "tiny-mamba.gguf")
    with Llama(path, n_ctx=64, n_threads=2, progress=False) as fresh:
        tokens = fresh.tokenize(b"The quick brown fox")
        want = fresh(tokens, max_tokens=3, temperature=0)["choices"][0]["text"]
        assert fresh._is_recurrent and not fresh._is_hybrid
    with Llama(path, n_ctx=64, n_threads=2, progress=False) as source:
        source.eval(tokens)
        state = source.save_state()
    with Llama(path, n_ctx=64, n_threads=2, progress=False) as loaded:
        loaded.eval(tokens[:-1] + [tokens[0]])  # something else in the cache first
        loaded.load_state(state)
        assert loaded.tokens == tokens
        assert loaded(tokens, max_tokens=3, temperature=0)["choices"][0]["text"] == want


def test_fork_spellings_of_embed_eval_and_speculative_settings(llm, tmp_path):
    from llama_ffi.llama_cpp.llama_speculative import (
        LlamaNGramMapDecoding,
        LlamaSpecEngine,
        SpecConfig,
        SpeculativeType,
        speculative_output_limits,
    )

    llm.eval(llm.tokenize(b"Hello"), copy_logits=False)
    with pytest.raises(TypeError, match="copy_logits"):
        llm.eval(llm.tokenize(b"Hello"), copy_logits="no")
    assert speculative_output_limits(32, 4, 3) == (16, 4) and speculative_output_limits(3, 4, 8) == (3, 3)
    assert SpecConfig(type=SpeculativeType.NGRAM_MAP_K, ngram_size_m=48).max_draft_tokens() == 48
    assert SpecConfig(draft_n_gpu_layers="all").resolved_draft_n_gpu_layers() == -2
    with pytest.raises(ValueError, match="draft_model_path"):
        SpecConfig(type=SpeculativeType.DRAFT_EAGLE3).validate()
    with pytest.raises(ValueError, match="draft_n_threads"):
        SpecConfig(type=SpeculativeType.DRAFT_MTP, draft_n_threads=0).validate()
    decoder = LlamaNGramMapDecoding(ngram_size=3, num_pred_tokens=3)
    assert isinstance(decoder, LlamaSpecEngine)
    history = [1, 2, 3, 7, 8, 1, 2, 3]
    decoder.begin(history)
    assert decoder.draft(history, n_past=len(history), id_last=3, n_max=2).tolist() == [7, 8]
    decoder.accept(1)  # one of two verified: the key drafts what was accepted, as llama.cpp's map does
    assert decoder.draft(history, n_past=len(history), id_last=3, n_max=3).tolist() == [7]
    assert decoder.spec_config().kind == SpeculativeType.NGRAM_MAP_K


def test_embed_splits_one_string_at_a_separator(smollm2_path):
    with Llama(smollm2_path, n_ctx=512, n_threads=2, embedding=True, progress=False) as embedder:
        split = embedder.embed("first text|second text", separator="|")
        assert split == embedder.embed(["first text", "second text"])
        with pytest.raises(TypeError, match="separator splits one string"):
            embedder.embed(["a", "b"], separator="|")


def test_formatter_refusals_are_jinja2_template_errors():
    import jinja2

    formatter = llama_chat_format.Jinja2ChatFormatter(
        "{% if not messages %}{{ raise_exception('No messages provided.') }}{% endif %}{{ messages[0].content }}",
        eos_token="</s>",
        bos_token="<s>",
    )
    assert formatter(messages=[{"role": "user", "content": "x"}]).added_special
    with pytest.raises(jinja2.TemplateError, match="No messages provided"):
        formatter(messages=[])


def test_a_formatter_handler_serves_asyncio_callers_too(llm):
    import asyncio

    messages = [{"role": "user", "content": "Name a colour."}]
    handler = llama_chat_format.Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"], eos_token="<|im_end|>", bos_token="<|im_start|>"
    ).to_chat_handler()
    want = llm.create_chat_completion(messages, chat_handler=handler, max_tokens=6, temperature=0)
    got = asyncio.run(llm.acreate_chat_completion(messages, chat_handler=handler, max_tokens=6, temperature=0))
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]


def test_the_migration_page_lists_every_refused_name():
    from llama_ffi.llama_cpp.not_provided import REFUSED

    page = (REPO / "docs" / "llama-cpp-python.md").read_text()
    named = [(m, f"`{n}`" if n != "*" else f"`llama_cpp.{m}` | every name") for m, t in REFUSED.items() for n in t]
    missing = [name for _, name in named if name not in page]
    assert not missing, f"docs/llama-cpp-python.md does not name: {missing}"
    assert "`llama_cpp.llama` | `AbortCriteria` |" in page  # a row says where the name was
