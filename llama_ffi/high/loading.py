"""Building a ``Llama``'s parts: its parameters, declared once (``LlamaParams``, llama-cpp-python's
names), and the owned C objects made in order — model, context, drafter, batch, projector,
adapters, engine — with one cleanup path: whatever step fails, what was made before it is freed,
in the reverse order (a context before its model, a projector and adapters before the model they
were made for), and the error is raised.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llama_ffi.high import adapters as adapters_module
from llama_ffi.high import compat, multimodal
from llama_ffi.high._checks import flag
from llama_ffi.high.batch import Batch
from llama_ffi.high.context import Context, ContextParams
from llama_ffi.high.engine import Counters, Engine, default_slots
from llama_ffi.high.engine.speculation import Speculation
from llama_ffi.high.errors import RequestTypeError
from llama_ffi.high.main_sequence import MainSequence
from llama_ffi.high.model import Model, ModelParams
from llama_ffi.high.speculative import SpecConfig, SpeculativeType, create_drafter
from llama_ffi.high.tokenizer import Tokenizer


@dataclasses.dataclass
class LlamaParams:
    """``Llama(model_path, **params)``: every parameter, with llama-cpp-python's name and default."""

    n_ctx: int | None = 512
    n_batch: int | None = None
    n_ubatch: int | None = None
    n_threads: int | None = None
    n_threads_batch: int | None = None
    n_gpu_layers: int | None = None
    seed: int = 0xFFFFFFFF
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    vocab_only: bool = False
    kv_overrides: Mapping[str, bool | int | float | str] | None = None
    type_k: int | str | None = None
    type_v: int | str | None = None
    flash_attn: bool | None = None
    rope_scaling_type: int | None = None
    rope_freq_base: float | None = None
    rope_freq_scale: float | None = None
    yarn_ext_factor: float | None = None
    yarn_attn_factor: float | None = None
    yarn_beta_fast: float | None = None
    yarn_beta_slow: float | None = None
    yarn_orig_ctx: int | None = None
    embeddings: bool = False
    pooling_type: int | None = None
    n_seq_max: int | None = None  # slots; default: engine.default_slots, with one pool of cells
    no_perf: bool | None = None
    kv_unified: bool | None = None
    progress: bool | None = None
    speculative: SpecConfig | None = None
    verbose: bool = False
    embedding: bool | None = None  # llama-cpp-python's name of embeddings
    chat_format: str | None = None
    chat_template: str | None = None  # a Jinja chat template that replaces the model's
    chat_handler: Any = None
    logits_all: bool = False
    last_n_tokens_size: int = 64
    split_mode: int | None = None
    main_gpu: int | None = None
    tensor_split: Sequence[float] | None = None
    rpc_servers: str | Sequence[str] | None = None
    offload_kqv: bool | None = None
    op_offload: bool | None = None
    swa_full: bool | None = None
    moe_cache_size: int | None = None
    attention_type: int | None = None
    numa: bool | int = False
    load_mtp: bool | None = None  # None: when speculative is DRAFT_MTP without a file of its own
    lora_path: str | os.PathLike | None = None
    lora_scale: float = 1.0
    mmproj_path: str | os.PathLike | None = None
    warmup: bool = False
    # set only by compat.init_options, from llama-cpp-python's other spellings (TRANSLATED)
    device: str | None = None
    spm_infill: bool = False
    template_arguments: dict | None = None

    def context_params(self) -> ContextParams:
        names = {f.name for f in dataclasses.fields(ContextParams)} & set(LlamaParams.__dataclass_fields__)
        return ContextParams(**{name: getattr(self, name) for name in names})

    def model_params(self) -> ModelParams:
        builtin_mtp = (  # DRAFT_MTP without a file of its own runs the target's NextN blocks: load them
            self.speculative is not None
            and self.speculative.kind == SpeculativeType.DRAFT_MTP
            and self.speculative.draft_model_path is None
        )
        return ModelParams(
            n_gpu_layers=self.n_gpu_layers,
            split_mode=self.split_mode,
            main_gpu=self.main_gpu,
            tensor_split=self.tensor_split,
            use_mmap=self.use_mmap,
            use_mlock=self.use_mlock,
            vocab_only=self.vocab_only,
            kv_overrides=self.kv_overrides,
            progress=self.progress,
            rpc_servers=self.rpc_servers,
            device=self.device,
            load_mtp=builtin_mtp if self.load_mtp is None else flag("load_mtp", self.load_mtp),
        )


TRANSLATED = {"device", "spm_infill", "template_arguments"}


def params(options: dict[str, Any]) -> LlamaParams:
    """``Llama``'s keyword arguments, llama-cpp-python's spellings translated, checked together."""
    ours = {k: v for k, v in options.items() if k in LlamaParams.__dataclass_fields__ and k not in TRANSLATED}
    legacy = compat.init_options({k: v for k, v in options.items() if k not in ours})
    if "speculative" in legacy and ours.get("speculative") is not None:
        raise ValueError("pass either draft_model or speculative, not both")
    p = LlamaParams(**ours, **legacy)
    if p.embedding is not None:
        p.embeddings = p.embeddings or flag("embedding", p.embedding)
    if p.speculative is not None and not isinstance(p.speculative, SpecConfig):
        raise RequestTypeError("speculative must be a SpecConfig")
    if p.n_seq_max is None and not p.embeddings:  # slots for many sequences at once (parallel)
        p.n_seq_max = default_slots(p.n_batch)
        p.kv_unified = True if p.kv_unified is None else p.kv_unified
    return p


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
    cparams = p.context_params()
    model = Model(model_path, p.model_params())
    parts = Parts(model, Tokenizer(model), Counters())
    if p.vocab_only:
        return parts
    try:
        parts.context = context = Context(model, cparams)
        if p.speculative is not None:
            parts.drafters = create_drafter(p.speculative, model, context)
        parts.batch = Batch(context.n_batch)
        if mmproj_path is not None:
            use_gpu = p.n_gpu_layers != 0
            parts.mtmd = multimodal.MtmdContext(model, mmproj_path, p.n_threads, use_gpu, handler=media_handler)
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
