"""The JamePeng fork's multimodal chat handlers, by name: each is the generic handler (the model's
own template renders the conversation, media parts included; mtmd encodes the media) with its
family's switches and a check that the projector is the family's.

``chat_handler=Qwen3VLChatHandler(clip_model_path=..., image_max_tokens=1024)`` gives the
projector, mtmd's image token bounds and the template variables; the Llama does the rest."""

from __future__ import annotations

import os
from pathlib import Path

from llama_ffi.high.errors import RequestTypeError, RequestValueError
from llama_ffi.high.validate import open_header

# GGUF keys naming the projector: one for a single-modality file, one per modality otherwise.
PROJECTOR_KEYS = ("clip.projector_type", "clip.vision.projector_type", "clip.audio.projector_type")


def projector_types(path: Path) -> set[str]:
    with open_header(path) as header:
        if header is None:
            return set()
        return {t for t in (header.string(k) for k in PROJECTOR_KEYS) if t}


class MTMDChatHandler:
    """``chat_handler=MTMDChatHandler(clip_model_path=...)``: any projector mtmd loads, the model's
    own chat template. ``image_min_tokens`` / ``image_max_tokens`` bound the tokens of an image for
    dynamic-resolution projectors (Qwen-VL); ``extra_template_arguments`` are variables for the
    template (a call's own ``extra_template_arguments`` win)."""

    family = ""  # the family's name, for messages
    projectors: frozenset[str] = frozenset()  # projector types the family ships (empty: any)

    def __init__(
        self,
        clip_model_path: str | os.PathLike | None = None,
        verbose: bool = False,
        *,
        mmproj_path: str | os.PathLike | None = None,
        image_min_tokens: int | None = None,
        image_max_tokens: int | None = None,
        extra_template_arguments: dict | None = None,
    ) -> None:
        path = clip_model_path if clip_model_path is not None else mmproj_path
        if path is None:
            raise RequestTypeError(f"{type(self).__name__} needs clip_model_path (the mmproj GGUF)")
        self.mmproj_path = Path(path)
        self.verbose = verbose
        for name, value in (("image_min_tokens", image_min_tokens), ("image_max_tokens", image_max_tokens)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise RequestValueError(f"{name} must be a positive int, got {value!r}")
        if image_min_tokens and image_max_tokens and image_min_tokens > image_max_tokens:
            raise RequestValueError(
                f"image_min_tokens ({image_min_tokens}) exceeds image_max_tokens ({image_max_tokens})"
            )
        self.image_min_tokens, self.image_max_tokens = image_min_tokens, image_max_tokens
        self.template_arguments = dict(extra_template_arguments or {})

    def check_projector(self) -> None:
        """A family handler refuses another family's projector, naming both."""
        if not self.projectors or not self.mmproj_path.is_file():
            return
        found = projector_types(self.mmproj_path)
        if found and not found & self.projectors:
            raise RequestValueError(
                f"{type(self).__name__} is for {self.family} projectors ({', '.join(sorted(self.projectors))}); "
                f"{self.mmproj_path.name} is {', '.join(sorted(found))}: use MTMDChatHandler, or the "
                "handler of that family"
            )


class _ReasoningHandler(MTMDChatHandler):
    """Families whose templates think on request: ``force_reasoning`` (the fork's name) or
    ``enable_thinking`` sets the template's ``enable_thinking``; unset, llama.cpp's default holds
    (thinking on, as llama-mtmd-cli and llama-server render)."""

    def __init__(
        self,
        clip_model_path=None,
        verbose: bool = False,
        *,
        force_reasoning: bool | None = None,
        enable_thinking: bool | None = None,
        **options,
    ) -> None:
        super().__init__(clip_model_path, verbose, **options)
        chosen = enable_thinking if enable_thinking is not None else force_reasoning
        if chosen is not None:
            self.template_arguments.setdefault("enable_thinking", bool(chosen))


class Qwen25VLChatHandler(MTMDChatHandler):
    family, projectors = "Qwen2.5-VL", frozenset({"qwen2.5vl_merger", "qwen2vl_merger"})


class Qwen3VLChatHandler(_ReasoningHandler):
    family, projectors = "Qwen3-VL", frozenset({"qwen3vl_merger"})


class Gemma3ChatHandler(MTMDChatHandler):
    family, projectors = "Gemma 3", frozenset({"gemma3"})


class Gemma4ChatHandler(_ReasoningHandler):
    family, projectors = "Gemma 4", frozenset({"gemma4v", "gemma4a", "gemma4uv", "gemma4ua"})


class Qwen3ASRChatHandler(MTMDChatHandler):
    family, projectors = "Qwen3-ASR", frozenset({"qwen3a"})


class Llava15ChatHandler(MTMDChatHandler):
    family, projectors = "LLaVA", frozenset({"mlp", "mlp_norm", "ldp", "ldpv2"})


class Llava16ChatHandler(Llava15ChatHandler):
    pass


HANDLERS = {
    cls.__name__: cls
    for cls in (
        MTMDChatHandler,
        Qwen25VLChatHandler,
        Qwen3VLChatHandler,
        Gemma3ChatHandler,
        Gemma4ChatHandler,
        Qwen3ASRChatHandler,
        Llava15ChatHandler,
        Llava16ChatHandler,
    )
}


def missing_handler(name: str) -> AttributeError:
    """The error for a fork handler name we do not provide, naming the alternative."""
    return AttributeError(
        f"llama-ffi has no {name}: use MTMDChatHandler(clip_model_path=...), which renders the model's own chat "
        f"template (media parts included) for any projector llama.cpp's mtmd loads; family handlers: "
        f"{', '.join(sorted(HANDLERS))}"
    )


def unpack_handler(chat_handler, mmproj_path, template_arguments: dict | None):
    """A Llama's (mmproj path, text chat handler, multimodal handler, template variables): a
    multimodal handler names the projector and its options, and the model's template renders the
    conversation; ``template_arguments`` (``chat_handler_kwargs``) win over the handler's."""
    if isinstance(chat_handler, MTMDChatHandler):
        chat_handler.check_projector()
        return (
            mmproj_path or chat_handler.mmproj_path,
            None,
            chat_handler,
            {**chat_handler.template_arguments, **(template_arguments or {})},
        )
    return mmproj_path, chat_handler, None, dict(template_arguments or {})
