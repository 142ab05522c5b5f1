"""The command line, run as a user would: a real model, real output on stdout."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from llama_ffi.testing import assert_same_or_near_tie

REPO = Path(__file__).resolve().parent.parent


def run(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llama_ffi", *args], cwd=REPO, input=stdin, capture_output=True, text=True, timeout=300
    )


PROMPT = "The capital of France is"


def greedy_text(model, prompt: str, n: int) -> str:
    """The same request through the library (the CLI's default context), on this machine."""
    from llama_ffi.high import Llama

    with Llama(model, n_ctx=2048, progress=False) as llm:
        return llm(prompt, max_tokens=n, temperature=0)["choices"][0]["text"]


def test_complete_streams_a_greedy_completion(smollm2_path):
    out = run("complete", PROMPT, "-m", str(smollm2_path), "-n", "8", "--temp", "0")
    assert out.returncode == 0, out.stderr
    assert out.stdout == greedy_text(smollm2_path, PROMPT, 8) + "\n"
    assert len(out.stdout.strip()) > 0


def test_complete_without_a_model_uses_the_default(smollm2_path):
    out = run("complete", PROMPT, "-n", "4", "--temp", "0")
    assert out.returncode == 0 and out.stdout == greedy_text(smollm2_path, PROMPT, 4) + "\n"
    assert "SmolLM2-135M-Instruct" in out.stderr


def test_chat_keeps_history(smollm2_path):
    two_turns = run(
        "chat",
        "-m",
        str(smollm2_path),
        "-n",
        "24",
        "--temp",
        "0",
        stdin="My name is Ada. Reply with OK.\nWhat is my name?\n",
    )
    assert two_turns.returncode == 0, two_turns.stderr
    replies = [line for line in two_turns.stdout.splitlines() if line.strip()]
    alone = run("chat", "-m", str(smollm2_path), "-n", "24", "--temp", "0", stdin="What is my name?\n")
    # greedy: the second reply differs from the same question asked without the first turn
    assert len(replies) >= 2 and alone.stdout.strip() and replies[-1] != alone.stdout.strip()


def test_bad_model_path_is_a_clear_error(tmp_path):
    out = run("complete", "x", "-m", str(tmp_path / "missing.gguf"))
    assert out.returncode == 2 and "not found" in out.stderr


# A text the model continues by copying it: drafts from the prompt are accepted.
COPY = (
    "Llamas are domesticated South American camelids, widely used as meat and pack animals by Andean "
    "cultures since the pre-Columbian era. Llamas are social animals and live with others as a herd. "
    "Their wool is soft and contains only a small amount of lanolin.\n\n"
    "Here is the same paragraph again, copied word for word:\n\nLlamas are domesticated"
)


def test_speculative_flags_keep_the_output_and_report_the_drafts(smollm2_path):
    base = ("complete", COPY, "-m", str(smollm2_path), "-n", "64", "--temp", "0")
    plain = run(*base)
    spec = run(*base, "--spec-type", "ngram-map-k")
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    from llama_ffi.high import Llama

    if spec.stdout != plain.stdout:  # a flipped near tie between the batched and single paths
        with Llama(smollm2_path, n_ctx=2048, progress=False) as ref:
            assert_same_or_near_tie(ref, base[1], spec.stdout[:-1], 64)
    drafts = re.search(r"speculative NGRAM_MAP_K: 64 tokens, (\d+) drafts", spec.stderr)
    assert drafts and int(drafts.group(1)) > 0, spec.stderr


def test_speculative_flag_errors(smollm2_path, tmp_path):
    model = ("complete", "x", "-m", str(smollm2_path), "-n", "2")
    missing = run(*model, "--spec-type", "draft", "-md", str(tmp_path / "no.gguf"))
    assert missing.returncode == 2 and "not found" in missing.stderr
    orphan = run(*model, "-md", str(tmp_path / "no.gguf"))
    assert orphan.returncode == 2 and "--model-draft needs --spec-type" in orphan.stderr
    unknown = run(*model, "--spec-type", "ngram-cache")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr


def test_cli_engine_names_are_the_implemented_types():
    from llama_ffi.high.speculative.config import IMPLEMENTED, SpeculativeType
    from llama_ffi.model_flags import SPEC_TYPES

    # plus llama-server's spellings: "none", and "draft-simple" for the draft model engine
    assert set(SPEC_TYPES) - {"none", "draft-simple"} == {t.value for t in IMPLEMENTED - {SpeculativeType.NONE}}


def test_devices_lists_what_ggml_sees():
    import llama_ffi

    out = run("devices")
    assert out.returncode == 0, out.stderr
    names = [line.split(":")[0] for line in out.stdout.splitlines()]
    assert names == [d["name"] for d in llama_ffi.build_info()["devices"]] and "CPU" in names
