"""Fill in the middle (``suffix=``) against llama-server's ``/infill`` from the pinned tree, greedy.

SmolLM2 has no FIM tokens, so both sides load it with the same metadata overrides that declare
three of its special tokens as FIM prefix / suffix / middle (llama.cpp also finds ``<reponame>``
as the repository token, so the repository header path runs too). The server runs on 127.0.0.1
with one slot; every request and the start-up are bounded in time, and it is stopped with SIGTERM."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from llama_ffi import lib, rpc
from llama_ffi.high import Llama

FIM = {
    "tokenizer.ggml.fim_pre_token_id": 8,
    "tokenizer.ggml.fim_suf_token_id": 9,
    "tokenizer.ggml.fim_mid_token_id": 10,
}
N_CTX, N_BATCH, N = 1024, 512, 16
CASES = [
    ("def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"),
    ("The three primary colours are red, ", " and blue."),
    ("x" * 3 + "\n" + "# a long prefix line\n" * 120, "return 0\n" * 100),
]  # both cut to fit a batch


@pytest.fixture(scope="module")
def llama_server(tree):
    from tools.native_build import build_reference_tools

    return build_reference_tools(tree, ("llama-server",)) / "llama-server"


class Server:
    def __init__(self, binary, model, *extra: str) -> None:
        self.port = rpc.free_port()
        overrides = [a for k, v in FIM.items() for a in ("--override-kv", f"{k}=int:{v}")]
        self.proc = subprocess.Popen(
            [
                str(binary),
                "-m",
                str(model),
                *overrides,
                "-c",
                str(N_CTX),
                "-b",
                str(N_BATCH),
                "-np",
                "1",
                "-t",
                "2",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-warmup",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"llama-server did not start: {self.proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)

    def infill(self, prefix: str, suffix: str) -> tuple[str, int]:
        """The middle (N tokens: end-of-generation barred) and how many prompt tokens it read."""
        body = json.dumps(
            {
                "input_prefix": prefix,
                "input_suffix": suffix,
                "n_predict": N,
                "temperature": 0,
                "ignore_eos": True,
                "cache_prompt": False,
            }
        ).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/infill", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as r:
            out = json.loads(r.read())
        return out["content"], out["tokens_evaluated"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM, whatever SIGINT disposition this run has
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.parametrize("spm", [False, True], ids=["psm", "spm"])
def test_infill_equals_llama_server(llama_server, smollm2_path, spm):
    server = Server(llama_server, smollm2_path, *(["--spm-infill"] if spm else []))
    try:
        want = [server.infill(prefix, suffix) for prefix, suffix in CASES]
    finally:
        server.stop()
    with Llama(
        smollm2_path, kv_overrides=FIM, n_ctx=N_CTX, n_batch=N_BATCH, n_threads=2, spm_infill=spm, progress=False
    ) as llm:
        vocab = llm.loaded_model.vocab_ptr  # the server's ignore_eos: every end-of-generation token barred
        never_end = {t: float("-inf") for t in range(llm.n_vocab) if lib.llama_vocab_is_eog(vocab, t)}
        outs = []
        for prefix, suffix in CASES:  # each evaluated afresh, as the server's (cache_prompt off)
            llm.reset()
            outs.append(llm(prefix, suffix=suffix, max_tokens=N, temperature=0, logit_bias=never_end))
        got = [(o["choices"][0]["text"], o["usage"]["prompt_tokens"]) for o in outs]
        plain = llm(CASES[0][0], max_tokens=N, temperature=0, logit_bias=never_end)["choices"][0]["text"]
        uncut = len(llm.tokenize(CASES[2][0], add_bos=False)) + len(llm.tokenize(CASES[2][1], add_bos=False))
    assert got == want
    assert all(o["usage"]["completion_tokens"] == N for o in outs)
    assert want[2][1] <= N_BATCH + 16 < uncut  # the long case was cut to fit a batch (and a small header)
    assert got[0][0] != plain  # the suffix and the FIM tokens change the answer


def test_infill_needs_fim_tokens_and_text(smollm2_path):
    with Llama(smollm2_path, n_ctx=256, progress=False) as plain:
        with pytest.raises(ValueError, match="suffix= needs a model with fill-in-the-middle tokens"):
            plain("def f(", suffix="return 1", max_tokens=4)
    with Llama(smollm2_path, kv_overrides=FIM, n_ctx=256, progress=False) as llm:
        with pytest.raises(TypeError, match="the prompt \\(the prefix\\) and the suffix must be str"):
            llm([1, 2, 3], suffix="return 1", max_tokens=4)
