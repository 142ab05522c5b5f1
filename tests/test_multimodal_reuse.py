"""Prefix reuse across requests with images and audio: after any request, the next one must answer
as a fresh ``Llama`` does, whatever the previous request left in the cache.

The text model is SmolLM2 with flash attention off, whose kernels give (nearly) the same logits
whatever the batch shape. Nearly: a prompt repeated in full decodes its last position alone,
where a fresh run decoded it in a batch, and random-weight media make the attention inputs large
enough that the last bits show (measured here: 0.014 in a log-probability). So answers are compared
token by token with their log-probabilities: equal within ``NOISE``, and a differing token only
where the reference's top-2 margin is below ``NOISE`` too (a near tie). A misplaced, stale or
missing media chunk moves them by far more (the media change the first token's log-probability by
more than that). Every prompt evaluation also checks the KV cache's highest position (conftest).
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tiny_gemma4
import tiny_mmproj

from llama_ffi import lib
from llama_ffi.high import Llama

N, N_CTX, QUESTION = 8, 4096, "Describe."
NOISE = 0.1  # log-probability: batch-shape rounding (0.014 measured) is well below, a wrong cache far above
# image, audio, both in one message (image first), text only; a walk through every ordered pair
KINDS = {"I": ("image",), "A": ("audio",), "B": ("image", "audio"), "T": ()}
WALK = "IIAIBITAABATBBTTI"


@pytest.fixture(scope="module")
def files(tree, tmp_path_factory):
    d = tmp_path_factory.mktemp("reuse")
    return {
        "image": tree.path / "tools" / "mtmd" / "test-1.jpeg",
        "audio": tree.path / "tools" / "mtmd" / "test-2.mp3",
        "gemma4": tiny_gemma4.write_gemma4_mmproj(d / "gemma4-mmproj.gguf", tree.path, text_width=576),
        "llava": tiny_mmproj.write_mmproj(d / "llava-mmproj.gguf", n_embd_text=576),
        "qwen2audio": tiny_mmproj.write_audio_mmproj(d / "qwen2audio-mmproj.gguf", n_embd_text=576),
    }


def open_llama(model: Path, mmproj: Path) -> Llama:
    # chat_format="chatml": llama-mtmd-cli renders with llama.cpp's built-in ChatML. One slot: this
    # is about reusing one sequence's cache (which slot a request takes is tests/test_engine.py's);
    # a request in another slot's cells after this one's differs by more than NOISE here, as random
    # media embeddings amplify how the attention kernels round over a longer cache.
    return Llama(
        model,
        mmproj_path=mmproj,
        n_ctx=N_CTX,
        n_threads=2,
        chat_format="chatml",
        flash_attn=False,
        n_seq_max=1,
        progress=False,
    )


def message(files, kinds) -> list[dict]:
    parts = []
    for kind in kinds:
        data = base64.b64encode(Path(files[kind]).read_bytes()).decode()
        parts.append(
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + data}}
            if kind == "image"
            else {"type": "input_audio", "input_audio": {"data": data, "format": "mp3"}}
        )
    return [{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}]


class Answer:
    """A greedy answer token by token: (token, log-probability) and the top-2 logit margin the
    choice was made with."""

    def __init__(self, out: dict, margins: list[float]) -> None:
        content = out["choices"][0]["logprobs"]["content"]
        self.text = out["choices"][0]["message"]["content"]
        self.tokens = [(c["token"], c["logprob"]) for c in content]
        self.margins = margins
        self.positions = out["usage"]["prompt_tokens"]


def ask(llm: Llama, files, kinds) -> Answer:
    vocab = llm.loaded_model.vocab_ptr
    never_end = np.array([t for t in range(llm.n_vocab) if lib.llama_vocab_is_eog(vocab, t)])
    margins = []

    def bar_the_end(input_ids, scores):  # llama.cpp's --ignore-eos, and what the choice was
        scores[never_end] = -np.inf
        top2 = np.partition(scores, -2)[-2:]
        margins.append(float(top2[1] - top2[0]))
        return scores

    out = llm.create_chat_completion(
        message(files, kinds), max_tokens=N, temperature=0, logprobs=True, logits_processor=bar_the_end
    )
    return Answer(out, margins)


def agrees(got: Answer, want: Answer) -> bool:
    """Token by token: the same token with the same log-probability (within NOISE), up to a
    first differing token that only a near tie of ``want``'s explains."""
    if got.positions != want.positions:
        return False
    for (token, logprob), (want_token, want_logprob), margin in zip(got.tokens, want.tokens, want.margins):
        if token != want_token:
            return margin < NOISE
        if abs(logprob - want_logprob) > NOISE:
            return False
    return len(got.tokens) == len(want.tokens)  # a shorter answer does not agree


def control_texts(llm: Llama) -> list[str]:
    """How the model's control tokens read when printed (llama-mtmd-cli prints them; a chat
    completion's content leaves them out)."""
    vocab = llm.loaded_model.vocab_ptr
    return [
        llm.tokenizer.piece(t, special=True).decode("utf-8", "replace")
        for t in range(llm.n_vocab)
        if lib.llama_vocab_is_control(vocab, t)
    ]


def agrees_with_text(want: Answer, text: str, controls: list[str]) -> bool:
    """``text`` (llama-mtmd-cli's, stripped) is ``want``'s, or leaves it at a near tie of want's."""
    for control in controls:
        text = text.replace(control, "")
    text = text.strip()
    if want.text.strip() == text:
        return True
    so_far = ""
    for (token, _), margin in zip(want.tokens, want.margins):
        if not text.startswith((so_far + token).lstrip()):
            return margin < NOISE
        so_far += token
    return False


def cli_answer(mtmd_cli, model, mmproj, files, kinds) -> str:
    cmd = [
        str(mtmd_cli),
        "-m",
        str(model),
        "--mmproj",
        str(mmproj),
        "-p",
        QUESTION,
        "-n",
        str(N),
        "--temp",
        "0",
        "-t",
        "2",
        "-c",
        str(N_CTX),
        "-fa",
        "off",
        "--ignore-eos",
        "--no-warmup",
    ]
    for kind in kinds:
        cmd += [f"--{kind}", str(files[kind])]
    out = subprocess.run(cmd, capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    return out.stdout.decode("utf-8", "replace").strip()


def shared_media(before: tuple, after: tuple) -> int:
    """How many of ``after``'s media lead ``before``'s too (the cache keeps those)."""
    n = 0
    while n < min(len(before), len(after)) and before[n] == after[n]:
        n += 1
    return n


def test_the_walk_covers_every_ordered_pair():
    assert {(a, b) for a, b in zip(WALK, WALK[1:])} == {(a, b) for a in KINDS for b in KINDS}


@pytest.mark.parametrize("projector", ["gemma4"])
def test_every_transition_answers_as_a_fresh_llama_and_the_cli(smollm2_path, files, mtmd_cli, projector):
    """Gemma 4's projector takes images and audio (the order of the issue: image, image + audio,
    image again, and every other pair). Each answer equals a fresh Llama's, which equals
    llama-mtmd-cli's; reuse shows in what is encoded and evaluated."""
    mmproj = files[projector]
    fresh = {}
    for key, kinds in KINDS.items():
        with open_llama(smollm2_path, mmproj) as llm:
            fresh[key] = ask(llm, files, kinds)
            controls = control_texts(llm)
        assert len(fresh[key].tokens) == N, key
        if kinds:  # without a medium llama-mtmd-cli starts its interactive chat
            cli = cli_answer(mtmd_cli, smollm2_path, mmproj, files, kinds)
            assert agrees_with_text(fresh[key], cli, controls), (key, fresh[key].text, cli, fresh[key].margins)
    for a in KINDS:  # every two requests' answers differ beyond NOISE: a mix-up would show
        for b in KINDS:
            assert a == b or any(
                t != u or abs(p - q) > NOISE for (t, p), (u, q) in zip(fresh[a].tokens, fresh[b].tokens)
            ), (a, b)

    with open_llama(smollm2_path, mmproj) as llm:
        previous = None
        for key in WALK:
            kinds = KINDS[key]
            encoded, evaluated = llm.mtmd.media_encoded, llm.n_evaluated
            answer = ask(llm, files, kinds)
            step = f"{previous}->{key}"
            assert agrees(answer, fresh[key]), (step, answer.tokens, fresh[key].tokens)
            if previous is not None:
                before = KINDS[previous]
                assert llm.mtmd.media_encoded - encoded == len(kinds) - shared_media(before, kinds), step
                if previous == key and not kinds:  # the last prompt position again (for its logits)
                    assert llm.n_evaluated - evaluated == 1 + N - 1, step  # then N - 1 tokens fed back
                elif previous == key:  # the text after the last medium again, as a fresh request decodes it
                    start, n, _ = llm.media_spans[-1]
                    assert llm.n_evaluated - evaluated == answer.positions - (start + n) + N - 1, step
            previous = key


def test_image_and_audio_projectors_of_two_families(smollm2_path, files):
    """The LLaVA-style image projector and the Qwen2-Audio-style one: a walk through their
    requests answers as fresh runs do."""
    for mmproj, kinds in ((files["llava"], ("image",)), (files["qwen2audio"], ("audio",))):
        with open_llama(smollm2_path, mmproj) as llm:
            want = {k: ask(llm, files, k) for k in ((), kinds)}
        with open_llama(smollm2_path, mmproj) as llm:
            for k in (kinds, (), kinds, kinds, ()):
                got = ask(llm, files, k)
                assert agrees(got, want[k]), (mmproj.name, k, got.tokens, want[k].tokens)


def test_a_sliding_window_cache_that_dropped_the_prefix_is_evaluated_again(gemma3_path):
    """gemma-3 attends through a 512-token window in most layers. With ``swa_full=False`` the
    cache keeps only about that much of a long prompt, so a later prompt that shares only its
    beginning cannot reuse it: the whole prompt is evaluated again (it answered from a cache
    missing the window before). A prompt that diverges inside the window still reuses it."""
    head = "Here is a list of facts about the planets of the solar system and their moons. " * 6
    long_tail = " ".join(f"Item {i}: the number {i * 7} is written as {i * 7}." for i in range(80))
    question = " Question: which planet is the largest? Answer:"
    options = dict(n_ctx=4096, n_threads=2, n_seq_max=1, swa_full=False, progress=False)

    def top(llm, prompt):
        out = llm(prompt, max_tokens=1, temperature=0, logprobs=3)
        return out["choices"][0]["logprobs"]["top_logprobs"][0]

    with Llama(gemma3_path, **options) as fresh:
        want = top(fresh, head + question)
    with Llama(gemma3_path, **options) as llm:
        top(llm, head + long_tail)
        assert llm._context.seq_pos_min(0) > 0  # the window moved on: the head's cells are gone
        evaluated = llm.n_evaluated
        assert top(llm, head + question) == want
        assert llm.n_evaluated - evaluated == len(llm.tokenize(head + question))  # nothing reused
        evaluated = llm.n_evaluated
        top(llm, head + question + " Jupiter")
        assert llm.n_evaluated - evaluated < 8  # inside the window: reused


def test_reused_media_prompts_decode_what_a_fresh_request_does(gemma3_path, files, tree, tmp_path_factory):
    """gemma-3 (repacked Q4_K kernels, whose results depend on the batch) with a Gemma 4 projector,
    flash attention on, Gemma's template: an exact repeat, image + audio after an image and an
    image after image + audio answer with exactly the log-probabilities of a fresh ``Llama``. The
    text after a medium is decoded again whole, as a fresh request decodes it (it moved them by
    0.07 and 1.25 when only the rest was decoded)."""
    mmproj = tiny_gemma4.write_gemma4_mmproj(
        tmp_path_factory.mktemp("g4") / "gemma4-640.gguf", tree.path, text_width=640
    )

    def open_gemma() -> Llama:
        return Llama(
            gemma3_path,
            mmproj_path=mmproj,
            n_ctx=N_CTX,
            n_threads=2,
            chat_format="gemma",
            flash_attn=True,
            n_seq_max=1,
            progress=False,
        )

    def logprobs(llm: Llama, kinds) -> list[float]:
        out = llm.create_chat_completion(message(files, kinds), max_tokens=4, temperature=0, logprobs=True)
        return [c["logprob"] for c in out["choices"][0]["logprobs"]["content"]]

    fresh = {}
    for key in "IB":
        with open_gemma() as llm:
            fresh[key] = logprobs(llm, KINDS[key])
    with open_gemma() as llm:
        for key in "IIBI":
            assert logprobs(llm, KINDS[key]) == fresh[key], key
