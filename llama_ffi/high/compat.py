"""llama-cpp-python's spellings, so that code written for it runs after changing the import.

Each of its parameters is supported with the same meaning, or refused with an error that names
it and the alternative: never silently dropped (docs/llama-cpp-python.md lists them all). The
parameters that llama.cpp itself removed are accepted at the value that means "off" (their
default there) and refused at any other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from llama_ffi import ffi, lib
from llama_ffi.high._checks import flag, integer
from llama_ffi.high.errors import RequestTypeError, RequestValueError
from llama_ffi.high.sampling_fields import LEGACY


class CallableInt(int):
    """An int that can also be called: ``llm.n_ctx`` (ours) and ``llm.n_ctx()`` (theirs)."""

    def __call__(self) -> int:
        return int(self)


def vocab_token(read):
    """A ``Llama`` method returning the special token ``read`` (``lib.llama_vocab_bos``...) names."""

    def token(llm) -> int:
        return read(llm.loaded_model.vocab_ptr)  # loaded_model: a clear error once closed

    token.__doc__ = f"The vocabulary's token of {read.__name__} (-1 where it has none)."
    return token


# Parameters llama.cpp removed: the value that keeps llama.cpp's behaviour, and why others fail.
REMOVED_SAMPLING = {
    "tfs_z": (1.0, "tail-free sampling was removed from llama.cpp; use min_p or top_n_sigma"),
    "penalize_nl": (
        True,
        "llama.cpp penalizes the newline like any other token; to spare it, pass logit_bias for the newline token",
    ),
}
REMOVED_INIT = {
    "n_parts": (-1, "model files are no longer split into parts; llama.cpp loads split GGUFs itself"),
    "low_vram": (False, "llama.cpp dropped low_vram; use n_gpu_layers and offload_kqv"),
    "mul_mat_q": (True, "llama.cpp always uses its quantized matmul kernels"),
    "lora_base": (None, "a separate LoRA base model is not supported by llama.cpp's adapters"),
}
REFUSED_INIT = {
    "tokenizer": "a Python tokenizer override is not supported: llama.cpp's own tokenizer is used",
}


def model_flag(read) -> property:
    """A read-only ``Llama`` property: ``read(model pointer)`` (``lib.llama_model_is_recurrent``...)."""
    return property(lambda llm: bool(read(llm.loaded_model.ptr)), doc=f"llama.cpp's {read.__name__}.")


def address_of(pointer) -> int:
    """A C pointer of the cffi layer as the address llama-cpp-python's ctypes functions take."""
    return int(ffi.cast("uintptr_t", pointer))


def lent_context_address(llm) -> int:
    """``Llama.ctx``: the context's address for ctypes code (guidance decodes through it); from
    then on the engine trusts no idle slot's cells (``SlotTable.lent``): its requests evaluate
    their prompts afresh, and clear what such code left in their sequences."""
    context = llm.context
    llm.engine.slots.lent = True
    return address_of(context.ptr)


def removed_parameters(kwargs: dict[str, Any], table: Mapping[str, tuple[Any, str]]) -> None:
    """Pop each removed parameter from ``kwargs``; refuse it unless it has its "off" value."""
    for name in list(kwargs):
        if name in table:
            off, why = table[name]
            value = kwargs.pop(name)
            if value != off and not (off is None and value is None):
                raise RequestValueError(f"{name}={value!r} is not supported: {why}")


def init_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Translate llama-cpp-python's constructor parameters that have another name here; refuse
    those that cannot work. Returns our keyword arguments to add."""
    ours: dict[str, Any] = {}
    draft_model = kwargs.pop("draft_model", None)
    if draft_model is not None:
        if not hasattr(draft_model, "spec_config"):
            raise RequestValueError(
                "draft_model must be a llama_ffi.llama_speculative.LlamaPromptLookupDecoding; for a "
                "draft GGUF pass speculative=SpecConfig(type='draft', draft_model_path=...)"
            )
        ours["speculative"] = draft_model.spec_config()
    removed_parameters(kwargs, REMOVED_INIT)
    if "spm_infill" in kwargs:  # suffix= order: suffix, then prefix (llama.cpp's --spm-infill)
        ours["spm_infill"] = flag("spm_infill", kwargs.pop("spm_infill"))
    handler_kwargs = kwargs.pop("chat_handler_kwargs", None) or {}  # the fork's: template variables
    if not isinstance(handler_kwargs, dict) or set(handler_kwargs) - {"extra_template_arguments"}:
        raise RequestValueError(
            "chat_handler_kwargs takes {'extra_template_arguments': {...}}; a multimodal handler's "
            "options go to its constructor (MTMDChatHandler(clip_model_path, image_max_tokens=...))"
        )
    ours["template_arguments"] = dict(handler_kwargs.get("extra_template_arguments") or {})
    if "device" in kwargs:  # LangChain's wrappers pass it (None, or a ggml device name)
        ours["device"] = kwargs.pop("device")
    if "f16_kv" in kwargs:  # the KV cache type before type_k / type_v existed
        if not kwargs.pop("f16_kv"):
            ours.update(type_k="f32", type_v="f32")
    for name, alternative in REFUSED_INIT.items():
        if kwargs.get(name) is not None:
            raise RequestValueError(f"{name} is not supported: {alternative}")
        kwargs.pop(name, None)
    if kwargs:
        raise RequestTypeError(f"Llama() got unexpected keyword argument(s): {', '.join(sorted(kwargs))}")
    return ours


def completion_options(kwargs: dict[str, Any]) -> None:
    """Check llama-cpp-python's completion parameters that have no effect here (in place)."""
    removed_parameters(kwargs, REMOVED_SAMPLING)
    if kwargs.pop("suffix", None) is not None:
        raise RequestValueError("suffix= (fill in the middle) is a parameter of create_completion only")


def chat_options(kwargs: dict[str, Any]) -> None:
    """llama-cpp-python's chat spellings, in place: legacy functions, chat logprobs."""
    functions = kwargs.pop("functions", None)
    function_call = kwargs.pop("function_call", None)
    if functions is not None:
        if kwargs.get("tools") is not None:
            raise RequestValueError("pass either tools or the legacy functions, not both")
        kwargs["tools"] = [{"type": "function", "function": f} for f in functions]
        if isinstance(function_call, dict):
            kwargs["tool_choice"] = {"type": "function", "function": {"name": function_call["name"]}}
        elif function_call is not None:
            kwargs["tool_choice"] = function_call  # "auto" / "none"
    elif function_call is not None:
        raise RequestValueError("function_call needs functions")
    top_logprobs = kwargs.pop("top_logprobs", None)
    if "logprobs" in kwargs and isinstance(kwargs["logprobs"], bool):
        kwargs["logprobs"] = (top_logprobs or 0) if kwargs["logprobs"] else None
    elif top_logprobs is not None:
        raise RequestValueError("top_logprobs needs logprobs=True")


def chat_logprobs(block: dict | None) -> dict | None:
    """A completion's logprobs block in the chat API's shape."""
    if block is None:
        return None
    return {
        "content": [
            {
                "token": tok,
                "logprob": lp,
                "bytes": list(tok.encode("utf-8")),
                "top_logprobs": [
                    {"token": t, "logprob": v, "bytes": list(t.encode("utf-8"))} for t, v in (top or {}).items()
                ],
            }
            for tok, lp, top in zip(block["tokens"], block["token_logprobs"], block["top_logprobs"])
        ]
    }


class LlamaState(bytes):
    """What ``save_state`` returns: the bytes ``load_state`` takes, with llama-cpp-python's
    ``LlamaState`` attributes (``n_tokens``, ``input_ids``, ``llama_state``, ``llama_state_size``,
    ``seed``)."""

    n_tokens: int
    input_ids: np.ndarray
    seed: int

    def __new__(cls, data: bytes, tokens: list[int], seed: int) -> LlamaState:
        self = super().__new__(cls, data)
        self.n_tokens = len(tokens)
        self.input_ids = np.asarray(tokens, dtype=np.intc)
        self.seed = seed
        return self

    @property
    def llama_state(self) -> bytes:
        return bytes(self)

    @property
    def llama_state_size(self) -> int:
        return len(self)


def scores(llm) -> np.ndarray:
    """(n_tokens, n_vocab) logits of the main slot's cached positions, as llama-cpp-python keeps
    them: every row with ``logits_all=True``; otherwise only the last row (the others zero)."""
    n = len(llm.tokens)
    out = np.zeros((n, llm.n_vocab), dtype=np.single)
    kept = llm.main_slot.scores
    if llm.logits_all and kept is not None:
        k = min(n, len(kept))
        out[:k] = kept[:k]
    elif n:
        out[-1] = llm.logits()
    return out


def ignoring_end_of_generation(tokenizer, bias: Mapping[int, float] | None) -> dict[int, float]:
    """``bias`` with every end-of-generation token banned: ``ignore_eos``, as llama-server does it."""
    return {**(bias or {}), **dict.fromkeys(tokenizer.end_of_generation(), -math.inf)}


def sampling_params(seed: int, last_n_tokens_size: int, tokenizer, ignore_eos: bool = False, **kw):
    """A request's SamplingParams from llama-cpp-python's names (``temp``, ``mirostat``); an
    unknown name is an error. ``penalty_last_n`` defaults to the Llama's ``last_n_tokens_size``;
    ``ignore_eos`` bans every end-of-generation token of ``tokenizer``'s vocabulary."""
    from llama_ffi.high.sampling import SamplingParams

    if flag("ignore_eos", ignore_eos):
        kw["logit_bias"] = ignoring_end_of_generation(tokenizer, kw.get("logit_bias"))
    kw.setdefault("penalty_last_n", last_n_tokens_size)
    for legacy, name in LEGACY.items():
        value = kw.pop(legacy, None)
        if value is not None:
            kw[name] = value
    unknown = sorted(set(kw) - set(SamplingParams.__dataclass_fields__))
    if unknown:
        raise RequestTypeError(f"unknown sampling parameter(s): {', '.join(unknown)}")
    return SamplingParams(seed=seed, **kw)


_numa_started = False


def init_numa(numa: bool | int) -> None:
    """llama-cpp-python's ``numa``: True (distribute) or a ggml_numa_strategy; once per process."""
    global _numa_started
    strategy = (
        (lib.GGML_NUMA_STRATEGY_DISTRIBUTE if numa else lib.GGML_NUMA_STRATEGY_DISABLED)
        if isinstance(numa, bool)
        else integer("numa", numa, 0, lib.GGML_NUMA_STRATEGY_COUNT - 1)
    )
    if strategy != lib.GGML_NUMA_STRATEGY_DISABLED and not _numa_started:
        lib.llama_numa_init(strategy)
        _numa_started = True


def openai_v1(result, stream: bool):
    """A chat result as the ``openai`` package's objects (instructor and others take them)."""
    try:
        from openai.types.chat import ChatCompletion, ChatCompletionChunk
    except ImportError as exc:
        raise ImportError("create_chat_completion_openai_v1 needs the openai package: pip install openai") from exc
    if stream:
        return (ChatCompletionChunk(**chunk) for chunk in result)
    return ChatCompletion(**result)
