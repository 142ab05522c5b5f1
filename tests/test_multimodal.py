"""Images through mtmd: a synthetic LLaVA-style projector for SmolLM2 (tiny_mmproj), llama.cpp's test
image and generated PNGs of odd sizes, against llama-mtmd-cli built from the pinned tree."""

from __future__ import annotations

import base64
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
import tiny_mmproj

from llama_ffi import ffi
from llama_ffi.high import Llama, MTMDChatHandler
from llama_ffi.high.speculative import SpecConfig
from llama_ffi.testing import parallel_bound

N, N_CTX = 16, 2048
QUESTION = "Describe."


def png(path: Path, width: int, height: int, seed: int) -> Path:
    """An RGB PNG of seeded noise (written by hand: no imaging library needed)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + row.tobytes() for row in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    )
    return path


@pytest.fixture(scope="module")
def media(tree, tmp_path_factory):
    d = tmp_path_factory.mktemp("media")
    return {
        "jpeg": tree.path / "tools" / "mtmd" / "test-1.jpeg",  # 640 x 488
        "tiny": png(d / "tiny.png", 7, 5, 1),
        "wide": png(d / "wide.png", 1200, 300, 2),
        "mmproj": tiny_mmproj.write_mmproj(d / "mmproj.gguf", n_embd_text=576),
        "misfit": tiny_mmproj.write_mmproj(d / "misfit.gguf", n_embd_text=64),
        "audio_mmproj": tiny_mmproj.write_audio_mmproj(d / "audio-mmproj.gguf", n_embd_text=576),
        "mp3": tree.path / "tools" / "mtmd" / "test-2.mp3",
        "dir": d,
    }


@pytest.fixture(scope="module")
def llm(smollm2_path, media):
    # chat_format="chatml": llama-mtmd-cli renders with llama.cpp's built-in ChatML (no default
    # system message, unlike SmolLM2's Jinja template)
    with Llama(
        smollm2_path, mmproj_path=media["mmproj"], n_ctx=N_CTX, n_threads=2, chat_format="chatml", progress=False
    ) as llm:
        yield llm


def reference(mtmd_cli, smollm2_path, media, images, mmproj_key="mmproj", flag="--image", question=QUESTION) -> str:
    cmd = [
        str(mtmd_cli),
        "-m",
        str(smollm2_path),
        "--mmproj",
        str(media[mmproj_key]),
        "-p",
        question,
        "-n",
        str(N),
        "--temp",
        "0",
        "-t",
        "2",
        "-c",
        str(N_CTX),
        "--no-warmup",
    ]
    for image in images:
        cmd += [flag, str(image)]
    out = subprocess.run(cmd, capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    return out.stdout.decode("utf-8", "replace").strip()


def ask(llm, images, **kw) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": str(i)}} for i in images]
    return llm.create_chat_completion(
        [{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}], max_tokens=N, temperature=0, **kw
    )


@pytest.mark.parametrize("images", [["jpeg"], ["tiny"], ["wide"], ["jpeg", "wide"]])
def test_greedy_output_equals_llama_mtmd_cli(llm, mtmd_cli, smollm2_path, media, images):
    files = [media[i] for i in images]
    got = ask(llm, files)
    assert got["choices"][0]["message"]["content"].strip() == reference(mtmd_cli, smollm2_path, media, files)
    # the prompt's positions count the media: 16 per image (a 32-pixel image of 8-pixel patches)
    text_only = llm.create_chat_completion([{"role": "user", "content": QUESTION}], max_tokens=1, temperature=0)
    assert got["usage"]["prompt_tokens"] == text_only["usage"]["prompt_tokens"] + 16 * len(files)


def test_every_form_of_an_image_is_the_same_image(llm, media):
    data = Path(media["jpeg"]).read_bytes()
    want = ask(llm, [media["jpeg"]])["choices"][0]["message"]["content"]
    for form in (f"file://{media['jpeg']}", "data:image/jpeg;base64," + base64.b64encode(data).decode(), data):
        message = {
            "role": "user",
            "content": [{"type": "image_url", "image_url": form}, {"type": "text", "text": QUESTION}],
        }
        assert (
            llm.create_chat_completion([message], max_tokens=N, temperature=0)["choices"][0]["message"]["content"]
            == want
        )
    before = llm.mtmd.media_encoded
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in ask(llm, [media["jpeg"]], stream=True))
    assert streamed == want and llm.mtmd.media_encoded == before  # the same request: cached, not re-encoded


def test_the_image_changes_the_answer(llm, media):
    answers = {ask(llm, [media[k]])["choices"][0]["message"]["content"] for k in ("jpeg", "tiny", "wide")}
    assert len(answers) > 1


def test_what_the_projector_takes(llm, smollm2_path):
    assert llm.supports_vision and not llm.supports_audio
    with Llama(smollm2_path, n_ctx=256, progress=False) as plain:
        assert not plain.supports_vision and plain.mtmd is None


def test_mtmd_chat_handler_loads_the_projector(smollm2_path, media):
    with Llama(
        smollm2_path,
        chat_handler=MTMDChatHandler(mmproj_path=media["mmproj"]),
        n_ctx=512,
        chat_format="chatml",
        progress=False,
    ) as llm:
        assert llm.supports_vision and llm.chat_handler is None
        assert ask(llm, [media["tiny"]])["choices"][0]["message"]["content"]
    assert llm._closed and llm.mtmd._ptr == ffi.NULL  # freed with the Llama, before its model


def test_bad_media_are_clear_errors(llm, smollm2_path, media, tmp_path):
    def message(part):
        return [{"role": "user", "content": [part, {"type": "text", "text": QUESTION}]}]

    cases = [
        ({"type": "image_url", "image_url": b"\x89PNG not really an image"}, ValueError, "could not be decoded"),
        ({"type": "image_url", "image_url": "https://example.com/cat.png"}, ValueError, "never fetches"),
        ({"type": "image_url", "image_url": "data:image/png;base64,@@@"}, ValueError, "base64 data is malformed"),
        ({"type": "image_url", "image_url": str(tmp_path / "none.png")}, FileNotFoundError, "image file not found"),
        ({"type": "video_url", "video_url": "x.mp4"}, ValueError, "unsupported type 'video_url'"),
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "ogg"}}, ValueError, "not one of wav"),
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, ValueError, "takes no audio"),
    ]
    for part, exc, match in cases:
        with pytest.raises(exc, match=match):
            llm.create_chat_completion(message(part), max_tokens=2)
    with pytest.raises(ValueError, match="3 media markers .* for 1 media items"):
        llm.create_chat_completion(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": str(media["tiny"])},
                        {"type": "text", "text": "<__media__><__media__>" + QUESTION},
                    ],
                }
            ],
            max_tokens=2,
        )
    with Llama(smollm2_path, n_ctx=256, progress=False) as plain:
        with pytest.raises(ValueError, match="loaded without an mmproj"):
            plain.create_chat_completion(message({"type": "image_url", "image_url": str(media["tiny"])}))
    with pytest.raises(FileNotFoundError, match="mmproj file not found"):
        Llama(smollm2_path, mmproj_path=tmp_path / "missing.gguf", progress=False)
    with pytest.raises(ValueError, match=r"mismatch between text model \(n_embd = 576\) and mmproj \(n_embd = 64\)"):
        Llama(smollm2_path, mmproj_path=media["misfit"], progress=False)
    assert ask(llm, [media["tiny"]])["choices"][0]["message"]["content"]  # still usable after all that


@pytest.mark.parametrize("kind", ["draft", "ngram-map-k"])
def test_speculative_decoding_beside_an_mmproj_drafts_the_text_turns(llm, smollm2_path, media, kind):
    """A draft model cannot see the image and an n-gram index would draft its placeholders: a
    prompt with media decodes plainly (the same answer as without speculation), a text prompt drafts
    (llama-server starts with both too)."""
    config = SpecConfig(type=kind, draft_model_path=smollm2_path, draft_n_max=4, ngram_size_n=3, ngram_size_m=8)
    want = ask(llm, [media["jpeg"]])["choices"][0]["message"]["content"]
    with Llama(
        smollm2_path, mmproj_path=media["mmproj"], n_ctx=N_CTX, chat_format="chatml", speculative=config, progress=False
    ) as speculating:
        assert ask(speculating, [media["jpeg"]])["choices"][0]["message"]["content"] == want
        assert speculating.last_speculative_stats is None  # the media prompt did not draft
        text = "one two three four one two three four one two three four one two"
        speculating.create_chat_completion([{"role": "user", "content": text}], max_tokens=24, temperature=0)
        assert speculating.last_speculative_stats.drafted_tokens > 0


def test_a_second_turn_reuses_the_cached_image(llm, smollm2_path, media):
    first = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": str(media["jpeg"])}, {"type": "text", "text": QUESTION}],
        }
    ]
    answer = llm.create_chat_completion(first, max_tokens=N, temperature=0)["choices"][0]["message"]["content"]
    conversation = first + [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And what colour is it?"},
    ]
    encoded, evaluated = llm.mtmd.media_encoded, llm.n_evaluated
    second = llm.create_chat_completion(conversation, max_tokens=N, temperature=0, logprobs=True, top_logprobs=2)
    assert llm.mtmd.media_encoded == encoded  # the image was not encoded again
    assert llm.n_evaluated - evaluated < second["usage"]["prompt_tokens"] - 16  # nor its prefix decoded
    with Llama(
        smollm2_path, mmproj_path=media["mmproj"], n_ctx=N_CTX, n_threads=2, chat_format="chatml", progress=False
    ) as fresh:
        whole = fresh.create_chat_completion(conversation, max_tokens=N, temperature=0, logprobs=True, top_logprobs=2)
        assert fresh.mtmd.media_encoded == 1
    # The first answer's tokens were decoded one at a time, the fresh run decodes them in the
    # prompt's batch, in other cells: the same answer, or one leaving it at a measured near tie.
    got = [c["token"] for c in second["choices"][0]["logprobs"]["content"]]
    want = whole["choices"][0]["logprobs"]["content"]
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b["token"]), None)
    if i is not None:
        margin = want[i]["top_logprobs"][0]["logprob"] - want[i]["top_logprobs"][1]["logprob"]
        assert margin < parallel_bound(llm), (i, margin, got, [c["token"] for c in want])
    else:
        assert len(got) == len(want)
    # another image at the same place is encoded (once no slot holds it); a text-only request
    # afterwards still works
    llm.reset()
    encoded = llm.mtmd.media_encoded
    other = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": str(media["wide"])}, {"type": "text", "text": QUESTION}],
        }
    ]
    llm.create_chat_completion(other, max_tokens=2, temperature=0)
    assert llm.mtmd.media_encoded == encoded + 1
    assert llm("The capital of France is", max_tokens=4, temperature=0)["choices"][0]["text"]


def test_a_cached_image_never_answers_for_another(llm, media):
    """The report: a stream about image A read for 2 chunks, a request about image B, the stream
    read to its end; asking about B again must answer about B, not A."""

    def about(image):
        return [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": str(media[image])}, {"type": "text", "text": QUESTION}],
            }
        ]

    want_b = llm.create_chat_completion(about("wide"), max_tokens=N, temperature=0)["choices"][0]["message"]["content"]
    want_a = llm.create_chat_completion(about("jpeg"), max_tokens=N, temperature=0)["choices"][0]["message"]["content"]
    assert want_a != want_b
    stream = llm.create_chat_completion(about("jpeg"), max_tokens=N, temperature=0, stream=True)
    head = [next(stream), next(stream)]
    llm.create_chat_completion(about("wide"), max_tokens=N, temperature=0)
    got_a = "".join(c["choices"][0]["delta"].get("content", "") for c in head + list(stream))
    again_b = llm.create_chat_completion(about("wide"), max_tokens=N, temperature=0)["choices"][0]["message"]["content"]
    assert again_b == want_b
    assert got_a == want_a


def test_n_choices_about_an_image(llm, media):
    messages = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": str(media["jpeg"])}, {"type": "text", "text": QUESTION}],
        }
    ]
    one = llm.create_chat_completion(messages, max_tokens=N, temperature=0)["choices"][0]["message"]["content"]
    encoded = llm.mtmd.media_encoded
    two = llm.create_chat_completion(messages, n=2, max_tokens=N, temperature=0)["choices"]
    assert [c["message"]["content"] for c in two] == [one, one]
    assert llm.mtmd.media_encoded - encoded <= 1  # both choices share one evaluation of the prompt


def test_state_of_a_multimodal_prompt_round_trips(llm, media, tmp_path):
    messages = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": str(media["jpeg"])}, {"type": "text", "text": QUESTION}],
        }
    ]
    want = llm.create_chat_completion(messages, max_tokens=N, temperature=0)["choices"][0]["message"]["content"]
    llm.save_state(tmp_path / "mm.state")
    llm.reset()
    llm.load_state(tmp_path / "mm.state")
    assert llm.media_spans and any(t < 0 for t in llm.tokens)
    encoded = llm.mtmd.media_encoded
    again = llm.create_chat_completion(messages, max_tokens=N, temperature=0)["choices"][0]["message"]["content"]
    assert again == want
    assert llm.mtmd.media_encoded == encoded  # the restored cache served the image


def test_cli_image_flags(smollm2_path, media):
    import sys

    repo = Path(__file__).resolve().parent.parent
    base = [sys.executable, "-m", "llama_ffi"]
    flags = ["-m", str(smollm2_path), "--mmproj", str(media["mmproj"]), "-n", str(N), "--temp", "0", "-t", "2"]
    with Llama(smollm2_path, mmproj_path=media["mmproj"], n_ctx=2048, n_threads=2, progress=False) as same:
        want = ask(same, [media["jpeg"]])["choices"][0]["message"]["content"]  # the CLI's context and template
    out = subprocess.run(
        [*base, "complete", QUESTION, *flags, "--image", str(media["jpeg"])],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == want + "\n"
    chat = subprocess.run(
        [*base, "chat", *flags],
        cwd=repo,
        input=f"/image {media['jpeg']}\n{QUESTION}\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert chat.returncode == 0, chat.stderr[-2000:]
    assert chat.stdout == want + "\n"
    bad = subprocess.run(
        [*base, "complete", QUESTION, "-m", str(smollm2_path), "--image", str(media["jpeg"])],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "need --mmproj" in bad.stderr


def test_audio_equals_llama_mtmd_cli(smollm2_path, media, mtmd_cli):
    """A tiny Qwen2-Audio-style projector and llama.cpp's test-2.mp3 (mtmd computes the log-mel
    input; 30 s chunks of 1500 positions)."""
    data = base64.b64encode(Path(media["mp3"]).read_bytes()).decode()
    message = [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": data, "format": "mp3"}},
                {"type": "text", "text": "Transcribe."},
            ],
        }
    ]
    with Llama(
        smollm2_path, mmproj_path=media["audio_mmproj"], n_ctx=N_CTX, n_threads=2, chat_format="chatml", progress=False
    ) as llm:
        assert llm.supports_audio and not llm.supports_vision
        got = llm.create_chat_completion(message, max_tokens=N, temperature=0)
        want = reference(mtmd_cli, smollm2_path, media, [media["mp3"]], "audio_mmproj", "--audio", "Transcribe.")
        assert got["choices"][0]["message"]["content"].strip() == want
        text_only = llm.create_chat_completion([{"role": "user", "content": "Transcribe."}], max_tokens=1)
        assert got["usage"]["prompt_tokens"] > text_only["usage"]["prompt_tokens"] + 100  # audio positions
        with pytest.raises(ValueError, match="takes no images"):
            ask(llm, [media["tiny"]])
