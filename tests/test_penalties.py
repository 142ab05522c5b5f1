"""Repeat, frequency and presence penalties and DRY cover the prompt, as in llama.cpp's completion:
greedy output equals ``llama-completion`` from the pinned tree with the same settings."""

from __future__ import annotations

import pytest
import reference_tools

from llama_ffi.high import Llama

PROMPTS = [
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the",
    "List the colours of the rainbow: red, orange, yellow, green, blue, indigo, violet. Again: red,",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
]
N_PREDICT = 32
N_CTX = 512
# (our keyword arguments, llama-completion's flags)
CASES = {
    "repeat": (dict(repeat_penalty=1.5), ["--repeat-penalty", "1.5"]),
    "repeat-window-16": (
        dict(repeat_penalty=1.3, penalty_last_n=16),
        ["--repeat-penalty", "1.3", "--repeat-last-n", "16"],
    ),
    "frequency-presence": (
        dict(frequency_penalty=0.8, presence_penalty=0.6),
        ["--frequency-penalty", "0.8", "--presence-penalty", "0.6"],
    ),
    "dry": (dict(dry_multiplier=0.8), ["--dry-multiplier", "0.8"]),
    "dry-all-settings": (
        dict(dry_multiplier=1.2, dry_base=2.0, dry_allowed_length=3, dry_penalty_last_n=128),
        ["--dry-multiplier", "1.2", "--dry-base", "2.0", "--dry-allowed-length", "3", "--dry-penalty-last-n", "128"],
    ),
}


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=N_CTX, n_threads=2, progress=False) as model:
        yield model


@pytest.mark.parametrize("prompt", PROMPTS, ids=["cat", "rainbow", "code"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_penalised_greedy_output_equals_llama_completion(llm, llama_completion, smollm2_path, case, prompt):
    kwargs, flags = CASES[case]
    want = reference_tools.completion(llama_completion, smollm2_path, prompt, N_PREDICT, N_CTX, ["--temp", "0", *flags])
    llm.reset()  # a fresh context, as llama-completion's
    got = llm(prompt, max_tokens=N_PREDICT, temperature=0.0, **kwargs)["choices"][0]["text"]
    assert got.rstrip("\n") == want


def test_the_penalties_change_the_output(llm):
    """The cases above would pass trivially if the penalties did nothing on these prompts."""
    prompt = PROMPTS[0]
    llm.reset()
    plain = llm(prompt, max_tokens=N_PREDICT, temperature=0.0)["choices"][0]["text"]
    for case, (kwargs, _) in CASES.items():
        llm.reset()
        assert llm(prompt, max_tokens=N_PREDICT, temperature=0.0, **kwargs)["choices"][0]["text"] != plain, case
