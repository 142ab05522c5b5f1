"""LangChain 0.4's ``LlamaCpp``, ``ChatLlamaCpp`` and ``LlamaCppEmbeddings`` and LlamaIndex's
``LlamaCPP``, as installed from the package registry today, run unchanged on llama-ffi once
``install_as_llama_cpp()`` lends it the ``llama_cpp`` name. They are installed into a virtual
environment of their own (``library_venvs``), never into the test run's; without the registry the
test is skipped with the reason. LlamaIndex's wrapper requires llama-cpp-python, which llama-ffi stands in for, so it is
installed without dependencies and its other requirement (llama-index-core) explicitly."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import library_venvs
import minilm
import pytest

from llama_ffi.high import Llama

REPO = Path(__file__).resolve().parent.parent
WRAPPERS = ["langchain-community==0.4.2", "llama-index-core>=0.13,<0.15"]
WITHOUT_DEPS = ["llama-index-llms-llama-cpp==0.7.0"]
PROMPT, N = "The capital of France is", 8

SCRIPT = r"""
import json, sys
import llama_ffi
assert llama_ffi.install_as_llama_cpp()  # the only line not of the libraries' own examples
model, embedder = sys.argv[1], sys.argv[2]
out = {}
from langchain_community.llms import LlamaCpp
llm = LlamaCpp(model_path=model, temperature=0, max_tokens=%(n)d, n_ctx=512, verbose=False)
out["langchain"] = llm.invoke(%(prompt)r)
out["langchain_stream"] = "".join(llm.stream(%(prompt)r))
from langchain_community.embeddings import LlamaCppEmbeddings
emb = LlamaCppEmbeddings(model_path=embedder, n_ctx=512, verbose=False)
out["documents"] = [len(v) for v in emb.embed_documents(["first text", "second text"])]
out["query"] = len(emb.embed_query("a query"))
from langchain_community.chat_models import ChatLlamaCpp
chat = ChatLlamaCpp(model_path=model, temperature=0, max_tokens=%(n)d, n_ctx=512, verbose=False)
out["chat"] = chat.invoke(%(prompt)r).content
from llama_index.llms.llama_cpp import LlamaCPP
li = LlamaCPP(model_path=model, temperature=0, max_new_tokens=%(n)d, context_window=512, verbose=False,
              model_kwargs={"n_gpu_layers": 0})
out["llamaindex"] = li.complete(%(prompt)r).text
out["llamaindex_window"] = li.metadata.context_window
print(json.dumps(out))
""" % {"prompt": PROMPT, "n": N}  # noqa: UP031 - a script full of braces: %-formatting leaves them alone


@pytest.fixture(scope="module")
def wrapper_env() -> tuple[Path, dict]:
    python = library_venvs.prepared("wrappers", WRAPPERS, WITHOUT_DEPS)
    return python, dict(os.environ, PYTHONPATH=str(REPO))


def test_langchain_and_llamaindex_run_unchanged(wrapper_env, tree, smollm2_path):
    python, env = wrapper_env
    done = subprocess.run(
        [str(python), "-c", SCRIPT, str(smollm2_path), str(minilm.gguf_path(tree))],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # LangChain's wrappers load with their own defaults (rope_freq_base 10000, n_batch 8: batch shapes
    # change CPU numerics, so the reference loads alike) and sample with repeat_penalty 1.1, top_k 40,
    # top_p 0.95; LlamaIndex passes llama-cpp-python's
    langchain_defaults = dict(temperature=0, repeat_penalty=1.1, top_k=40, top_p=0.95)
    langchain_load = dict(rope_freq_base=10000.0, rope_freq_scale=1.0, n_batch=8, last_n_tokens_size=64)
    with Llama(smollm2_path, n_ctx=512, progress=False, **langchain_load) as llm:
        langchain = llm(PROMPT, max_tokens=N, **langchain_defaults)["choices"][0]["text"]
        messages = [{"role": "user", "content": PROMPT}]
        chat = llm.create_chat_completion(messages, max_tokens=N, **langchain_defaults)
    with Llama(smollm2_path, n_ctx=512, progress=False) as llm:
        plain = llm(PROMPT, max_tokens=N, temperature=0)["choices"][0]["text"]
    assert out["chat"] == chat["choices"][0]["message"]["content"]
    assert out["langchain"] == out["langchain_stream"] == langchain
    assert out["documents"] == [384, 384] and out["query"] == 384  # LlamaCppEmbeddings passes device=None
    assert out["llamaindex"] == plain and out["llamaindex_window"] == 512
