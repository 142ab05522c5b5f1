"""The one typed request every API converts into, once, at its edge: ``Llama.create_completion``'s
keyword arguments (``from_keywords``), the chat call's, the server's protocol models
(``server.params``). It holds the sampling parameters (``SamplingParams``, resolved against the
Llama's defaults), the stopping rules, the constraint, and the output options; from here down
nothing travels as ``**kwargs``. A new sampling parameter is one line in ``sampling_fields`` (and
its sampler); a new option of the request is one field here plus its API mappings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from llama_ffi.high.compat import completion_options as compat_options
from llama_ffi.high.errors import RequestTypeError
from llama_ffi.high.sampling import SamplingParams

LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
StoppingCriterion = Callable[[np.ndarray, np.ndarray], bool]


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
    sampling: SamplingParams = SamplingParams()
    # stopping
    max_tokens: int | None = 16  # None: until the end of generation or a full context
    stop: tuple[str, ...] = ()
    stopping_criteria: tuple[StoppingCriterion, ...] = ()
    # constraints and the caller's own processing
    grammar: Any = None  # a LlamaGrammar
    logits_processor: tuple[LogitsProcessor, ...] = ()
    active_loras: Sequence[Mapping[str, object]] | None = None  # checked by the adapters' registry
    control_vector: Any = None
    # what the prompt becomes and what comes back
    n: int = 1
    echo: bool = False
    suffix: str | None = None  # fill in the middle: the prompt is the prefix
    logprobs: int | None = None
    model: str | None = None  # the model's name in the result (default: its path)
    stream: bool = False
    progress: bool = False  # a stream's prompt_progress chunks (llama-server's return_progress)
    slot_id: int | None = None  # llama-server's id_slot


OPTIONS = frozenset(f.name for f in dataclasses.fields(GenerationRequest)) - {"sampling"}
# llama-cpp-python's names of two options, as create_completion spells them
SPELLINGS = {"return_progress": "progress"}


def normalize_stop(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    out = []
    for s in stop:
        if not isinstance(s, str):
            raise RequestTypeError(f"stop must be str or a list of str, got {type(s).__name__}")
        if s:
            out.append(s)
    return tuple(out)


def as_tuple(x) -> tuple:
    """A processor or criterion, a list or tuple of them, or None, as a tuple (llama-cpp-python
    takes a ``LogitsProcessorList``, a list, or one callable)."""
    if x is None:
        return ()
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def from_keywords(llm, keywords: Mapping[str, Any], **defaults) -> GenerationRequest:
    """llama-cpp-python's keyword arguments (``create_completion``'s, a chat call's) as the typed
    request: the request's own options by name, every other keyword a sampling parameter (its
    llama-cpp-python spelling translated, an unknown one refused by name: ``Llama.sampling_params``).
    ``defaults``: options the call defaults otherwise (a chat's ``max_tokens`` is None)."""
    own = dict(defaults)
    sampling = {}
    for key, value in keywords.items():
        name = SPELLINGS.get(key, key)
        if name in OPTIONS:
            own[name] = value
        else:
            sampling[key] = value
    compat_options(sampling)
    own["stop"] = normalize_stop(own.get("stop"))
    own["logits_processor"] = as_tuple(own.get("logits_processor"))
    own["stopping_criteria"] = as_tuple(own.get("stopping_criteria"))
    return GenerationRequest(llm.sampling_params(**sampling), **own)
