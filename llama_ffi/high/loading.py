"""Building a ``Llama``'s parts: its parameters, each declared once (``ContextParams``,
``ModelParams``, and ``LlamaParams`` for the rest; llama-cpp-python's names), and the owned C
objects made in order — model, context, drafter, batch, projector, adapters, engine — with one
cleanup path: whatever step fails, what was made before it is freed, in the reverse order (a
context before its model, a projector and adapters before the model they were made for), and the
error is raised.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from llama_ffi.high import adapters as adapters_module
from llama_ffi.high import compat, multimodal
from llama_ffi.high._checks import flag
from llama_ffi.high.batch import Batch
from llama_ffi.high.context import Context, ContextParams
from llama_ffi.high.engine import Counters, Engine, default_slots
from llama_ffi.high.engine.speculation import Speculation
from llama_ffi.high.errors import RequestTypeError, RequestValueError
from llama_ffi.high.main_sequence import MainSequence
from llama_ffi.high.model import Model, ModelParams
from llama_ffi.high.speculative import SpecConfig, SpeculativeType, create_drafter
from llama_ffi.high.tokenizer import Tokenizer


@dataclasses.dataclass
class LlamaParams:
    """``Llama(model_path, **params)``: the context's options (``ContextParams``), the model's
    (``ModelParams``), each declared there once with its default, and the options of ``Llama``
    itself below, with llama-cpp-python's names and defaults."""

    context: ContextParams = dataclasses.field(default_factory=ContextParams)
    model: ModelParams = dataclasses.field(default_factory=ModelParams)
    seed: int = 0xFFFFFFFF
    speculative: SpecConfig | None = None
    verbose: bool = False
    embedding: bool | None = None  # llama-cpp-python's name of embeddings
    chat_format: str | None = None
    chat_template: str | None = None  # a Jinja chat template that replaces the model's
    chat_handler: Any = None
    logits_all: bool = False
    last_n_tokens_size: int = 64
    numa: bool | int = False
    lora_path: str | os.PathLike | None = None
    lora_scale: float = 1.0
    mmproj_path: str | os.PathLike | None = None
    warmup: bool = False
    # set only by compat.init_options, from llama-cpp-python's other spellings (TRANSLATED)
    spm_infill: bool = False
    template_arguments: dict | None = None


CONTEXT_FIELDS = frozenset(f.name for f in dataclasses.fields(ContextParams))
MODEL_FIELDS = frozenset(f.name for f in dataclasses.fields(ModelParams))
OWN_FIELDS = frozenset(f.name for f in dataclasses.fields(LlamaParams)) - {"context", "model"}
TRANSLATED = {"device", "spm_infill", "template_arguments"}


def params(options: dict[str, Any]) -> LlamaParams:
    """``Llama``'s keyword arguments, each given to the declaration that has it (llama-cpp-python's
    other spellings translated first), checked together."""
    known = CONTEXT_FIELDS | MODEL_FIELDS | OWN_FIELDS
    ours = {k: v for k, v in options.items() if k in known and k not in TRANSLATED}
    legacy = compat.init_options({k: v for k, v in options.items() if k not in ours})
    if "speculative" in legacy and ours.get("speculative") is not None:
        raise RequestValueError("pass either draft_model or speculative, not both")
    given = {**ours, **legacy}
    own = {k: v for k, v in given.items() if k in OWN_FIELDS}
    speculative = own.get("speculative")
    if speculative is not None and not isinstance(speculative, SpecConfig):
        raise RequestTypeError("speculative must be a SpecConfig")
    context = {k: v for k, v in given.items() if k in CONTEXT_FIELDS}
    if own.get("embedding") is not None:
        context["embeddings"] = context.get("embeddings", False) or flag("embedding", own["embedding"])
    if context.get("n_seq_max") is None and not context.get("embeddings"):  # slots for many sequences at once
        context["n_seq_max"] = default_slots(context.get("n_batch"))
        context["kv_unified"] = True if context.get("kv_unified") is None else context["kv_unified"]
    model = {k: v for k, v in given.items() if k in MODEL_FIELDS}
    if "load_mtp" not in model:  # DRAFT_MTP without a file of its own runs the target's NextN blocks
        model["load_mtp"] = (
            speculative is not None
            and speculative.kind == SpeculativeType.DRAFT_MTP
            and speculative.draft_model_path is None
        )
    return LlamaParams(ContextParams(**context), ModelParams(**model), **own)


@dataclasses.dataclass
class Parts:
    """What a ``Llama`` owns in C, and the order it is freed in (``close``)."""

    model: Model
    tokenizer: Tokenizer
    counters: Counters
    context: Context | None = None
    speculation: Speculation | None = None
    drafters: Any = None  # until the speculation owns them
    batch: Batch | None = None
    mtmd: multimodal.MtmdContext | None = None
    adapters: adapters_module.Adapters | None = None
    engine: Engine | None = None
    main_sequence: MainSequence | None = None

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()  # the requests in flight end first
        if self.speculation is not None:
            self.speculation.close()
        elif self.drafters is not None:
            self.drafters.close()
        if self.batch is not None:
            self.batch.close()
        if self.mtmd is not None:
            self.mtmd.close()  # before the model it was made for
        if self.context is not None:
            self.context.close()
        if self.adapters is not None:
            self.adapters.close()  # before the model, which frees what is left of them
        self.model.close()


def load(model_path: str | os.PathLike, p: LlamaParams, mmproj_path, media_handler) -> Parts:
    """The parts of a ``Llama``, made in order; a failing step frees what was made before it."""
    cparams = p.context
    model = Model(model_path, p.model)
    parts = Parts(model, Tokenizer(model), Counters())
    if p.model.vocab_only:
        return parts
    try:
        parts.context = context = Context(model, cparams)
        if p.speculative is not None:
            parts.drafters = create_drafter(p.speculative, model, context)
        parts.batch = Batch(context.n_batch)
        if mmproj_path is not None:
            use_gpu = p.model.n_gpu_layers != 0
            parts.mtmd = multimodal.MtmdContext(model, mmproj_path, p.context.n_threads, use_gpu, handler=media_handler)
        parts.adapters = adapters = adapters_module.Adapters(model)
        if p.lora_path is not None:
            name = Path(p.lora_path).stem
            adapters.load(name, p.lora_path)
            adapters.default = adapters.select([{"name": name, "scale": p.lora_scale}], None)
        if parts.drafters is not None:
            parts.speculation = Speculation(p.speculative, parts.drafters, context)
        parts.engine = Engine(context, parts.batch, parts.tokenizer, adapters, parts.counters, parts.speculation)
        parts.main_sequence = MainSequence(
            context, parts.batch, parts.engine, parts.tokenizer, parts.counters, flag("logits_all", p.logits_all)
        )
    except BaseException:
        parts.close()
        raise
    return parts
