"""The multimodal families users run, each through its own chat template with media parts, against
llama-mtmd-cli (``--jinja``, the same files): Qwen2.5-VL and Qwen3-VL (M-RoPE: an image fills
fewer positions than KV cells), Gemma 4 (an image and an audio clip in one message), Qwen3-ASR
(audio, the instruction in the system message). Tiny seeded-random fixtures: tiny_qwen.py and
tiny_gemma4.py say how each is made."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tiny_gemma4
import tiny_qwen
from test_multimodal import png

from llama_ffi.high import Llama
from llama_ffi.high.chat import media_parts
from llama_ffi.high.chat.completion import call_options, plan_chat
from llama_ffi.high.chat.templates import ChatTemplate
from llama_ffi.testing import bound

N, N_CTX = 16, 4096
QUESTION = "Describe."


@pytest.fixture(scope="module")
def fx(tree, smollm2_path, tmp_path_factory):
    d = tmp_path_factory.mktemp("families")
    templates = tree.path / "models" / "templates"
    text = tiny_qwen.write_text_model
    return {
        "qwen25vl": (
            text(d / "qwen2vl.gguf", "qwen2vl", smollm2_path, tiny_qwen.QWEN2VL_TEMPLATE),
            tiny_qwen.write_qwen25vl_mmproj(d / "qwen25vl-mmproj.gguf", tree.path),
        ),
        "qwen3vl": (
            text(
                d / "qwen3vl.gguf",
                "qwen3vl",
                smollm2_path,
                (templates / "Qwen3.5-4B.jinja").read_text(),
                deepstack=len(tiny_qwen.QWEN3VL_DEEPSTACK),
            ),
            tiny_qwen.write_qwen3vl_mmproj(d / "qwen3vl-mmproj.gguf", tree.path),
        ),
        "gemma4": (
            text(d / "gemma4.gguf", "llama", smollm2_path, (templates / "google-gemma-4-31B-it.jinja").read_text()),
            tiny_gemma4.write_gemma4_mmproj(d / "gemma4-mmproj.gguf", tree.path, text_width=tiny_qwen.WIDTH),
        ),
        "qwen3asr": (
            text(d / "asr.gguf", "llama", smollm2_path, tiny_qwen.QWEN3ASR_TEMPLATE),
            tiny_qwen.write_qwen3asr_mmproj(d / "qwen3asr-mmproj.gguf", tree.path),
        ),
        "a": png(d / "a.png", 64, 48, 1),
        "b": png(d / "b.png", 100, 60, 2),
        "wide": png(d / "wide.png", 1200, 300, 3),
        "mp3": tree.path / "tools" / "mtmd" / "test-2.mp3",
    }


def mtmd_cli_text(
    mtmd_cli, model: Path, mmproj: Path, media: list[tuple[str, Path]], prompt: str = QUESTION, *extra: str
) -> str:
    cmd = [
        str(mtmd_cli),
        "-m",
        str(model),
        "--mmproj",
        str(mmproj),
        "-p",
        prompt,
        "-n",
        str(N),
        "--temp",
        "0",
        "-t",
        "2",
        "-c",
        str(N_CTX),
        "--no-warmup",
        "--jinja",
        *extra,
    ]
    for flag, path in media:
        cmd += [flag, str(path)]
    out = subprocess.run(cmd, capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    return out.stdout.decode("utf-8", "replace").strip()


def image(path: Path) -> dict:
    return {"type": "image_url", "image_url": {"url": str(path)}}


def audio(path: Path) -> dict:
    return {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(path.read_bytes()).decode(), "format": "mp3"},
    }


def answer(llm, messages, **kw) -> tuple[str, list[tuple[int, int, float]], dict]:
    """The raw reply (reasoning and content: a thinking template's reply is all reasoning), each
    step's (token, runner-up, top-2 margin), and the usage."""
    steps = []

    def record(ids, logits):
        a, b = np.argsort(-logits)[:2]
        steps.append((int(a), int(b), float(logits[a] - logits[b])))
        return logits

    out = llm.create_chat_completion(messages, max_tokens=N, temperature=0, logits_processor=[record], **kw)
    message = out["choices"][0]["message"]
    return (message.get("reasoning_content") or "") + (message.get("content") or ""), steps, out["usage"]


def assert_same_or_near_tie(llm, reference: str, got: str, steps) -> None:
    """Equal to llama-mtmd-cli's text, or first different where our top-2 margin is a near tie
    (below ``bound``: the batch-shape gap of this model measured here, plus a floor) and the
    reference took our runner-up. llama-mtmd-cli decodes a system message as its own batch."""
    if got.strip() == reference:
        return
    pieces = [llm.tokenizer.piece(t).decode("utf-8", "replace") for t, _, _ in steps]
    i, done = 0, ""
    while i < len(pieces) and reference.startswith((done + pieces[i]).strip()):
        done += pieces[i]
        i += 1
    assert i < len(steps), f"{got!r} vs llama-mtmd-cli {reference!r}"
    runner_up = llm.tokenizer.piece(steps[i][1]).decode("utf-8", "replace")
    assert steps[i][2] < bound(llm) and reference[len(done.strip()) :].lstrip().startswith(runner_up.strip()[:1]), (
        f"diverged at token {i} (margin {steps[i][2]:.4f}): {got!r} vs llama-mtmd-cli {reference!r}"
    )


@pytest.mark.parametrize("which", ["a", "b", "wide"])
def test_qwen25vl_equals_llama_mtmd_cli(fx, mtmd_cli, which):
    from llama_ffi.llama_multimodal import Qwen25VLChatHandler

    model, mmproj = fx["qwen25vl"]
    with Llama(
        model, chat_handler=Qwen25VLChatHandler(clip_model_path=mmproj), n_ctx=N_CTX, n_threads=2, progress=False
    ) as llm:
        messages = [{"role": "user", "content": [image(fx[which]), {"type": "text", "text": QUESTION}]}]
        got, steps, usage = answer(llm, messages)
        assert_same_or_near_tie(llm, mtmd_cli_text(mtmd_cli, model, mmproj, [("--image", fx[which])]), got, steps)
        # M-RoPE: the image fills fewer positions than cells; usage counts positions
        prompt = plan_chat(llm, messages).tokens
        assert usage["prompt_tokens"] == len(prompt) < prompt.n_cells


def test_the_two_images_give_two_answers(fx):
    model, mmproj = fx["qwen25vl"]
    with Llama(model, mmproj_path=mmproj, n_ctx=N_CTX, n_threads=2, progress=False) as llm:
        replies = {
            answer(llm, [{"role": "user", "content": [image(fx[k]), {"type": "text", "text": QUESTION}]}])[0]
            for k in ("a", "b")
        }
        assert len(replies) == 2


def test_qwen25vl_second_turn_reuses_the_image(fx):
    model, mmproj = fx["qwen25vl"]
    first = [{"role": "user", "content": [image(fx["wide"]), {"type": "text", "text": QUESTION}]}]
    with Llama(model, mmproj_path=mmproj, n_ctx=N_CTX, n_threads=2, n_seq_max=1, progress=False) as llm:
        reply = answer(llm, first)[0]
        conversation = first + [{"role": "assistant", "content": reply}, {"role": "user", "content": "More."}]
        encoded, evaluated = llm.mtmd.media_encoded, llm.n_evaluated
        second, _, usage = answer(llm, conversation)
        assert llm.mtmd.media_encoded == encoded  # not encoded again
        assert llm.n_evaluated - evaluated < usage["prompt_tokens"] - 30  # nor its prefix decoded
    with Llama(model, mmproj_path=mmproj, n_ctx=N_CTX, n_threads=2, n_seq_max=1, progress=False) as fresh:
        assert answer(fresh, conversation)[0] == second


def test_kv_cells_beyond_the_context_are_a_clear_error(fx):
    model, mmproj = fx["qwen25vl"]
    with Llama(model, mmproj_path=mmproj, n_ctx=256, n_threads=2, progress=False) as llm:
        messages = [{"role": "user", "content": [image(fx["wide"]), {"type": "text", "text": QUESTION}]}]
        with pytest.raises(ValueError, match=r"positions but needs \d+ KV cells"):
            llm.create_chat_completion(messages, max_tokens=4)
        assert answer(llm, [{"role": "user", "content": [image(fx["a"])]}])[2]["prompt_tokens"] > 0


@pytest.mark.parametrize("bounds", [{}, {"image_max_tokens": 16}])
def test_qwen3vl_equals_llama_mtmd_cli(fx, mtmd_cli, bounds):
    from llama_ffi.llama_chat_format import Qwen3VLChatHandler  # the fork's import path

    model, mmproj = fx["qwen3vl"]
    flags = [a for k, v in bounds.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    with Llama(
        model, chat_handler=Qwen3VLChatHandler(mmproj, **bounds), n_ctx=N_CTX, n_threads=2, progress=False
    ) as llm:
        messages = [{"role": "user", "content": [image(fx["wide"]), {"type": "text", "text": QUESTION}]}]
        got, steps, usage = answer(llm, messages)
        assert_same_or_near_tie(
            llm, mtmd_cli_text(mtmd_cli, model, mmproj, [("--image", fx["wide"])], QUESTION, *flags), got, steps
        )
        if bounds:
            with Llama(model, mmproj_path=mmproj, n_ctx=N_CTX, n_threads=2, progress=False) as unbounded:
                assert usage["prompt_tokens"] < answer(unbounded, messages)[2]["prompt_tokens"]


def test_qwen3vl_reasoning_switch_reaches_the_template(fx):
    from llama_ffi.llama_multimodal import Qwen3VLChatHandler

    model, mmproj = fx["qwen3vl"]
    messages = [{"role": "user", "content": [image(fx["a"]), {"type": "text", "text": QUESTION}]}]
    prompts = {}
    for force in (True, False):
        with Llama(
            model, chat_handler=Qwen3VLChatHandler(mmproj, force_reasoning=force), n_ctx=N_CTX, progress=False
        ) as llm:
            prompts[force] = llm.detokenize(list(plan_chat(llm, messages, **call_options(llm, {})).tokens)).decode()
    assert prompts[True].endswith("<think>\n") and prompts[False].endswith("<think>\n\n</think>\n\n")


def test_gemma4_image_and_audio_in_one_message_equal_llama_mtmd_cli(fx, mtmd_cli):
    from llama_ffi.llama_multimodal import Gemma4ChatHandler

    model, mmproj = fx["gemma4"]
    with Llama(model, chat_handler=Gemma4ChatHandler(mmproj), n_ctx=N_CTX, n_threads=2, progress=False) as llm:
        assert llm.supports_vision and llm.supports_audio
        messages = [{"role": "user", "content": [image(fx["a"]), audio(fx["mp3"]), {"type": "text", "text": QUESTION}]}]
        got, steps, _ = answer(llm, messages)
        reference = mtmd_cli_text(mtmd_cli, model, mmproj, [("--image", fx["a"]), ("--audio", fx["mp3"])])
        assert_same_or_near_tie(llm, reference, got, steps)
        # the template's own placeholders (<|image|>, <|audio|>) became one marker each: mtmd's
        # begin/end tokens wrap each medium, in order
        prompt = llm.detokenize(list(plan_chat(llm, messages).tokens)).decode()
        assert prompt.count("<|image>") == prompt.count("<|audio>") == 1
        assert prompt.index("<|image>") < prompt.index("<|audio>")


def test_qwen3asr_audio_with_a_system_instruction(fx, mtmd_cli):
    from llama_ffi.llama_multimodal import Qwen3ASRChatHandler

    model, mmproj = fx["qwen3asr"]
    instruction = "Transcribe the audio in English."
    with Llama(model, chat_handler=Qwen3ASRChatHandler(mmproj), n_ctx=N_CTX, n_threads=2, progress=False) as llm:
        messages = [
            {"role": "system", "content": instruction},
            {"role": "user", "content": [audio(fx["mp3"]), {"type": "text", "text": "dropped by the template"}]},
        ]
        got, steps, _ = answer(llm, messages)
        reference = mtmd_cli_text(mtmd_cli, model, mmproj, [("--audio", fx["mp3"])], "<__media__>", "-sys", instruction)
        assert_same_or_near_tie(llm, reference, got, steps)
        prompt = llm.detokenize(list(plan_chat(llm, messages).tokens)).decode()
        assert instruction in prompt and "dropped" not in prompt
        with pytest.raises(ValueError, match="takes no images"):
            llm.create_chat_completion([{"role": "user", "content": [image(fx["a"])]}], max_tokens=1)


def test_a_template_without_the_medium_is_a_clear_error(fx):
    """Qwen2-VL's template has no audio part: audio sent to it is refused, naming the medium."""
    model, _ = fx["qwen25vl"]
    _, gemma4_mmproj = fx["gemma4"]  # a projector that takes audio, under a template that does not
    with Llama(model, mmproj_path=gemma4_mmproj, n_ctx=N_CTX, n_threads=2, progress=False) as llm:
        with pytest.raises(ValueError, match=r"emitted nothing for media item 0 \(audio\)"):
            llm.create_chat_completion([{"role": "user", "content": [audio(fx["mp3"])]}], max_tokens=1)


def _render(source: str):
    template = ChatTemplate(source)
    return lambda messages: template.render(messages, add_generation_prompt=True)


def test_media_follow_the_templates_order_and_placeholders():
    # a template that puts every audio part before the image parts: the media are reordered
    audio_first = (
        "{% for m in messages %}{% for p in m.content %}{% if p.type == 'audio' %}<A>{% endif %}"
        "{% endfor %}{% for p in m.content %}{% if p.type == 'image' %}<I>{% elif p.type == 'text' %}"
        "{{ p.text }}{% endif %}{% endfor %}{% endfor %}"
    )
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "audio"}, {"type": "text", "text": "Hi"}]}]
    text, order = media_parts.render_with_markers(_render(audio_first), messages, ["image", "audio"], "@")
    assert text == "@@Hi" and order == [1, 0]
    # the same placeholder twice in a row stays two media (the diff cannot split them wrongly)
    same = (
        "{% for p in messages[0].content %}{% if p.type == 'image' %}<|image|>{% else %}{{ p.text }}{% endif %}"
        "{% endfor %}"
    )
    two = [{"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "x"}]}]
    assert media_parts.render_with_markers(_render(same), two, ["image", "image"], "@") == ("@@x", [0, 1])
    # what a template writes around a placeholder for the medium stays text
    labelled = (
        "{% for p in messages[0].content %}{% if p.type == 'image' %}{{ '\\n\\nPicture: <s><pad></s>\\n' }}"
        "{% else %}{{ p.text }}{% endif %}{% endfor %}"
    )
    one = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}
    ]
    assert media_parts.render_with_markers(_render(labelled), one, ["image"], "@")[0] == "a\n\nPicture: @\nb"


def test_a_template_that_emits_a_medium_in_two_places_is_refused():
    twice = (
        "{% for p in messages[0].content %}{% if p.type == 'image' %}<I>{% else %}{{ p.text }}{% endif %}{% endfor %}"
        "{% if messages[0].content | selectattr('type', 'equalto', 'image') | list %}<again>{% endif %}"
    )
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    with pytest.raises(ValueError, match="changed its output in 2 places for media item 0"):
        media_parts.render_with_markers(_render(twice), messages, ["image"], "@")
    assert not media_parts.template_takes_media("{{ messages[0].content }}")


def test_handler_names_and_template_arguments(fx, tmp_path):
    import llama_ffi.llama_chat_format as chat_format
    import llama_ffi.llama_multimodal as multimodal

    assert chat_format.Qwen25VLChatHandler is multimodal.Qwen25VLChatHandler
    for name in (
        "MTMDChatHandler",
        "Qwen25VLChatHandler",
        "Qwen3VLChatHandler",
        "Gemma4ChatHandler",
        "Qwen3ASRChatHandler",
        "Gemma3ChatHandler",
        "Llava15ChatHandler",
    ):
        assert issubclass(getattr(multimodal, name), multimodal.MTMDChatHandler)
    with pytest.raises(AttributeError, match="no MoondreamChatHandler: use MTMDChatHandler"):
        _ = multimodal.MoondreamChatHandler
    with pytest.raises(ImportError):
        exec("from llama_ffi.llama_multimodal import NanoLlavaChatHandler")
    model, mmproj = fx["qwen25vl"]
    _, gemma4_mmproj = fx["gemma4"]
    with pytest.raises(ValueError, match="Qwen25VLChatHandler is for Qwen2.5-VL projectors.*gemma4"):
        Llama(model, chat_handler=multimodal.Qwen25VLChatHandler(gemma4_mmproj), progress=False)
    with pytest.raises(ValueError, match="image_min_tokens .* exceeds image_max_tokens"):
        multimodal.Qwen3VLChatHandler(mmproj, image_min_tokens=64, image_max_tokens=16)
    with pytest.raises(ValueError, match="chat_handler_kwargs takes"):
        Llama(model, chat_handler_kwargs={"image_max_tokens": 4}, progress=False)
    messages = [{"role": "user", "content": [image(fx["a"]), {"type": "text", "text": QUESTION}]}]
    with Llama(
        model,
        chat_handler=multimodal.Qwen25VLChatHandler(mmproj),
        n_ctx=N_CTX,
        progress=False,
        chat_handler_kwargs={"extra_template_arguments": {"add_vision_id": True}},
    ) as llm:
        prompt = llm.detokenize(list(plan_chat(llm, messages, **call_options(llm, {})).tokens)).decode()
        assert "Picture 1: " in prompt
        # a call's own template variables win
        plain = plan_chat(llm, messages, **call_options(llm, {"extra_template_arguments": {"add_vision_id": False}}))
        assert "Picture" not in llm.detokenize(list(plain.tokens)).decode()


def test_control_llava_through_a_template_without_media_parts(smollm2_path, tmp_path, mtmd_cli, fx):
    """Today's LLaVA-style projector under SmolLM2's own (text-only) template: llama.cpp's rule,
    the marker where the part was, equal to llama-mtmd-cli --jinja."""
    import tiny_mmproj

    from llama_ffi.llama_multimodal import Llava15ChatHandler

    mmproj = tiny_mmproj.write_mmproj(tmp_path / "llava-mmproj.gguf", n_embd_text=576)
    with Llama(smollm2_path, chat_handler=Llava15ChatHandler(mmproj), n_ctx=N_CTX, n_threads=2, progress=False) as llm:
        assert not media_parts.template_takes_media(llm.metadata["tokenizer.chat_template"])
        got, steps, _ = answer(llm, [{"role": "user", "content": [image(fx["a"]), {"type": "text", "text": QUESTION}]}])
        assert_same_or_near_tie(llm, mtmd_cli_text(mtmd_cli, smollm2_path, mmproj, [("--image", fx["a"])]), got, steps)


@pytest.mark.parametrize("bounds", [{"image_min_tokens": 100_000}, {"image_max_tokens": 1}])
def test_image_token_bounds_outside_the_projectors_limits_are_refused(fx, bounds):
    from llama_ffi.llama_multimodal import Qwen3VLChatHandler

    model, mmproj = fx["qwen3vl"]
    with pytest.raises(ValueError, match=r"could not load the multimodal projector .*image_(max|min)_pixels"):
        Llama(model, chat_handler=Qwen3VLChatHandler(mmproj, **bounds), progress=False)


@pytest.mark.parametrize("size", [(1, 1), (2000, 2), (4000, 3000)])
def test_images_of_extreme_sizes_are_resized_not_refused(fx, tmp_path, size):
    model, mmproj = fx["qwen25vl"]
    path = png(tmp_path / "odd.png", *size, seed=9)
    with Llama(model, mmproj_path=mmproj, n_ctx=N_CTX, n_threads=2, progress=False) as llm:
        usage = answer(llm, [{"role": "user", "content": [image(path), {"type": "text", "text": QUESTION}]}])[2]
        assert usage["prompt_tokens"] > 8 and usage["completion_tokens"] >= 1


def test_tools_offered_beside_media_under_a_template_without_tools(fx):
    """The tool instructions join a system message that holds media parts (as a text part)."""
    model, mmproj = fx["qwen25vl"]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    messages = [
        {"role": "system", "content": [image(fx["a"]), {"type": "text", "text": "Reference picture."}]},
        {"role": "user", "content": [image(fx["b"]), {"type": "text", "text": QUESTION}]},
    ]
    with Llama(model, mmproj_path=mmproj, n_ctx=N_CTX, n_threads=2, progress=False) as llm:
        prompt = llm.detokenize(list(plan_chat(llm, messages, tools=tools).tokens)).decode()
        assert prompt.index("Reference picture.") < prompt.index("lookup") < prompt.index(QUESTION)
        assert prompt.count("<|vision_start|>") == 2
        assert llm.create_chat_completion(messages, tools=tools, max_tokens=4)["usage"]["completion_tokens"] >= 1
