"""LangChain 0.4's ``LlamaCpp`` and ``LlamaCppEmbeddings`` and LlamaIndex's ``LlamaCPP``, as installed
from the package registry today, run unchanged on llama-ffi through a ``llama_cpp`` import shim that
only re-exports llama-ffi. They are installed into a virtual environment of their own (cached under
~/.cache/llama-ffi/venvs), never into the test run's; without the registry the test is skipped with
the reason. LlamaIndex's wrapper requires llama-cpp-python, which the shim stands in for, so it is
installed without dependencies and its other requirement (llama-index-core) explicitly."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import minilm
import pytest

from llama_ffi.high import Llama

REPO = Path(__file__).resolve().parent.parent
WRAPPERS = ["langchain-community==0.4.2", "llama-index-core>=0.13,<0.15"]
WITHOUT_DEPS = ["llama-index-llms-llama-cpp==0.7.0"]
SHIM = (
    '"""llama_cpp, as llama-ffi: re-exports only."""\n'
    "from llama_ffi import Llama, LlamaGrammar, __version__  # noqa: F401\n"
)
PROMPT, N = "The capital of France is", 8

SCRIPT = r"""
import json, sys
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
from llama_index.llms.llama_cpp import LlamaCPP
li = LlamaCPP(model_path=model, temperature=0, max_new_tokens=%(n)d, context_window=512, verbose=False,
              model_kwargs={"n_gpu_layers": 0})
out["llamaindex"] = li.complete(%(prompt)r).text
out["llamaindex_window"] = li.metadata.context_window
print(json.dumps(out))
""" % {"prompt": PROMPT, "n": N}  # noqa: UP031 - a script full of braces: %-formatting leaves them alone


def running_site_packages() -> list[str]:
    """Where the interpreter running the tests finds llama-ffi's dependencies (a virtual
    environment's site-packages when the README's commands run in one, as a new user's do)."""
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def _cache() -> Path:
    # keyed on the running environment: a venv made for another one would miss its packages
    key = hashlib.sha256(repr((sys.prefix, running_site_packages(), WRAPPERS, WITHOUT_DEPS)).encode()).hexdigest()[:12]
    base = Path(os.environ.get("LLAMA_FFI_CACHE") or Path.home() / ".cache" / "llama-ffi")
    return base / "venvs" / f"wrappers-{key}"


def library_venv(env_dir: Path) -> Path:
    """A virtual environment of its own for libraries that must not enter the test run's, which
    still imports llama-ffi's dependencies from the running environment: a ``.pth`` file appends
    its site-packages (after the venv's own, so the libraries' pins win there)."""
    venv.EnvBuilder(clear=True, with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "llama_ffi_test_run.pth").write_text("\n".join(running_site_packages()) + "\n")
    return python


@pytest.fixture(scope="module")
def wrapper_env(tmp_path_factory) -> tuple[Path, dict]:
    env_dir = _cache()
    python = env_dir / "bin" / "python"
    if not (env_dir / ".ready").is_file():
        python = library_venv(env_dir)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        for cmd in (pip + WRAPPERS, pip + ["--no-deps"] + WITHOUT_DEPS):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                pytest.skip(
                    f"the wrappers could not be installed from the registry (offline?): {done.stderr.strip()[-400:]}"
                )
        (env_dir / ".ready").write_text("\n".join(WRAPPERS + WITHOUT_DEPS) + "\n")
    shim = tmp_path_factory.mktemp("shim")
    (shim / "llama_cpp").mkdir()
    (shim / "llama_cpp" / "__init__.py").write_text(SHIM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), str(REPO)]))
    return python, env


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
    with Llama(smollm2_path, n_ctx=512, progress=False) as llm:
        # LangChain's defaults: repeat_penalty 1.1, top_k 40, top_p 0.95; LlamaIndex passes llama-cpp-python's
        langchain = llm(PROMPT, max_tokens=N, temperature=0, repeat_penalty=1.1, top_k=40, top_p=0.95)["choices"][0][
            "text"
        ]
        plain = llm(PROMPT, max_tokens=N, temperature=0)["choices"][0]["text"]
    assert out["langchain"] == out["langchain_stream"] == langchain
    assert out["documents"] == [384, 384] and out["query"] == 384  # LlamaCppEmbeddings passes device=None
    assert out["llamaindex"] == plain and out["llamaindex_window"] == 512
