"""``Llama``: a model, one context and its KV cache, with llama-cpp-python's names.

It owns the model and the context (``close()``, ``with``, GC). Every generation request goes
through its engine (``llama_ffi.high.engine``), which decodes the requests of all threads
together; single-sequence work (``eval``, ``save_state``) takes the context between two steps.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from llama_ffi import lib
from llama_ffi._logging import enable_verbose_logging
from llama_ffi.high import adapters, compat, completion, embedding, hub, multimodal, state
from llama_ffi.high._checks import flag, integer
from llama_ffi.high.batch import Batch
from llama_ffi.high.context import ClosedError, Context, ContextParams
from llama_ffi.high.engine import Counters, Engine, default_slots, results
from llama_ffi.high.engine.slots import Slot
from llama_ffi.high.engine.speculation import Speculation
from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.high.main_sequence import MainSequence
from llama_ffi.high.model import Model, ModelParams
from llama_ffi.high.sampling import SamplerChain, SamplingParams
from llama_ffi.high.speculative import SpecConfig, SpeculativeStats, SpeculativeType, create_drafter
from llama_ffi.high.tokenizer import Tokenizer


class Llama:
    """A model and one context with llama-cpp-python's API; each capability lives in its module."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        n_ctx: int | None = 512,
        n_batch: int | None = None,
        n_ubatch: int | None = None,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        n_gpu_layers: int | None = None,
        seed: int = 0xFFFFFFFF,
        use_mmap: bool | None = None,
        use_mlock: bool | None = None,
        vocab_only: bool = False,
        kv_overrides: Mapping[str, bool | int | float | str] | None = None,
        type_k: int | str | None = None,
        type_v: int | str | None = None,
        flash_attn: bool | None = None,
        rope_scaling_type: int | None = None,
        rope_freq_base: float | None = None,
        rope_freq_scale: float | None = None,
        yarn_ext_factor: float | None = None,
        yarn_attn_factor: float | None = None,
        yarn_beta_fast: float | None = None,
        yarn_beta_slow: float | None = None,
        yarn_orig_ctx: int | None = None,
        embeddings: bool = False,
        pooling_type: int | None = None,
        n_seq_max: int | None = None,
        no_perf: bool | None = None,
        kv_unified: bool | None = None,
        progress: bool | None = None,
        speculative: SpecConfig | None = None,
        verbose: bool = False,
        # llama-cpp-python's names (docs/llama-cpp-python.md)
        embedding: bool | None = None,
        chat_format: str | None = None,
        chat_handler=None,
        logits_all: bool = False,
        last_n_tokens_size: int = 64,
        split_mode: int | None = None,
        main_gpu: int | None = None,
        tensor_split: Sequence[float] | None = None,
        rpc_servers: str | Sequence[str] | None = None,
        offload_kqv: bool | None = None,
        op_offload: bool | None = None,
        swa_full: bool | None = None,
        moe_cache_size: int | None = None,
        attention_type: int | None = None,
        numa: bool | int = False,
        load_mtp: bool | None = None,
        lora_path: str | os.PathLike | None = None,
        lora_scale: float = 1.0,
        mmproj_path: str | os.PathLike | None = None,
        warmup: bool = False,
        **legacy,
    ) -> None:
        self._closed = True
        self.verbose = verbose
        legacy_options = compat.init_options(legacy)
        type_k = legacy_options.get("type_k", type_k)
        type_v = legacy_options.get("type_v", type_v)
        if "speculative" in legacy_options:
            if speculative is not None:
                raise ValueError("pass either draft_model or speculative, not both")
            speculative = legacy_options["speculative"]
        if embedding is not None:
            embeddings = embeddings or flag("embedding", embedding)
        mmproj_path, chat_handler, media_handler, self.template_arguments = multimodal.unpack_handler(
            chat_handler, mmproj_path, legacy_options.get("template_arguments")
        )  # + chat_handler_kwargs
        if mmproj_path is not None and speculative is not None:
            raise ValueError("speculative decoding with an mmproj is not supported: the engines draft text only")
        self.chat_format = chat_format
        self.chat_handler = chat_handler
        self.spm_infill = legacy_options.get("spm_infill", False)  # suffix= puts the suffix first
        self.logits_all = flag("logits_all", logits_all)
        self.last_n_tokens_size = integer("last_n_tokens_size", last_n_tokens_size, -1)
        compat.init_numa(numa)
        if speculative is not None and not isinstance(speculative, SpecConfig):
            raise TypeError("speculative must be a SpecConfig")
        if verbose:
            enable_verbose_logging()
        self.set_seed(seed)
        if n_seq_max is None and not embeddings:  # slots for many sequences at once (parallel)
            n_seq_max = default_slots(n_batch)
            kv_unified = True if kv_unified is None else kv_unified
        cparams = ContextParams(
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=n_ubatch,
            n_threads=n_threads,
            n_threads_batch=n_threads_batch,
            rope_scaling_type=rope_scaling_type,
            rope_freq_base=rope_freq_base,
            rope_freq_scale=rope_freq_scale,
            yarn_ext_factor=yarn_ext_factor,
            yarn_attn_factor=yarn_attn_factor,
            yarn_beta_fast=yarn_beta_fast,
            yarn_beta_slow=yarn_beta_slow,
            yarn_orig_ctx=yarn_orig_ctx,
            type_k=type_k,
            type_v=type_v,
            flash_attn=flash_attn,
            embeddings=embeddings,
            pooling_type=pooling_type,
            n_seq_max=n_seq_max,
            no_perf=no_perf,
            kv_unified=kv_unified,
            offload_kqv=offload_kqv,
            op_offload=op_offload,
            swa_full=swa_full,
            attention_type=attention_type,
            moe_cache_size=moe_cache_size,
        )
        self.context_params = cparams.to_c()  # validated before the (slow) model load
        batch_size = self.context_params.n_batch
        if speculative is not None:
            speculative.validate(batch_size)
        self.model_path = str(model_path)
        # DRAFT_MTP without a separate file runs the target's own NextN blocks: load them too.
        builtin_mtp = (
            speculative is not None
            and speculative.kind == SpeculativeType.DRAFT_MTP
            and speculative.draft_model_path is None
        )
        self._model = Model(
            model_path,
            ModelParams(
                n_gpu_layers=n_gpu_layers,
                split_mode=split_mode,
                main_gpu=main_gpu,
                tensor_split=tensor_split,
                use_mmap=use_mmap,
                use_mlock=use_mlock,
                vocab_only=vocab_only,
                kv_overrides=kv_overrides,
                progress=progress,
                rpc_servers=rpc_servers,
                device=legacy_options.get("device"),
                load_mtp=builtin_mtp if load_mtp is None else flag("load_mtp", load_mtp),
            ),
        )
        self.tokenizer = Tokenizer(self._model)
        self.model_params = self._model.params  # llama-cpp-python's attribute (the C struct)
        self._context: Context | None = None
        self.mtmd: multimodal.MtmdContext | None = None
        self._batch: Batch | None = None
        self.speculative = speculative
        self.counters = Counters()
        self.engine: Engine | None = None  # None only with vocab_only (no context)
        self.main_sequence: MainSequence | None = None
        # Steps of the engine and single-sequence work take turns on the context.
        self.lock = threading.Lock()
        drafters = None
        if not vocab_only:
            try:
                self._context = Context(self._model, cparams)
                if speculative is not None:
                    drafters = create_drafter(speculative, self._model, self._context)
            except BaseException:
                if self._context is not None:
                    self._context.close()
                self._model.close()
                raise
            self._batch = Batch(self._context.n_batch)
            self.mtmd = (
                None
                if mmproj_path is None
                else multimodal.MtmdContext(
                    self._model, mmproj_path, n_threads, use_gpu=n_gpu_layers != 0, handler=media_handler
                )
            )
            self.adapters = adapters.Adapters(self._model)
            if lora_path is not None:
                self.adapters.load(Path(lora_path).stem, lora_path)
                self.adapters.default = self.adapters.select(
                    [{"name": Path(lora_path).stem, "scale": lora_scale}], None
                )
            self.context_params.n_ctx = self._context.n_ctx  # 0 meant "the model's": say which
            speculation = None if drafters is None else Speculation(speculative, drafters, self._context)
            self.engine = Engine(
                self._context, self._batch, self.tokenizer, self.adapters, self.lock, self.counters, speculation
            )
            self.main_sequence = MainSequence(
                self._context, self._batch, self.engine, self.tokenizer, self.counters, self.logits_all
            )
        self._closed = False
        if warmup and self._context is not None:
            self.warm_up()

    @classmethod
    def from_pretrained(
        cls,
        repo_id: str,
        filename: str,
        additional_files: Sequence[str] | None = None,
        local_dir: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
        revision: str | None = None,
        **kwargs,
    ) -> Llama:
        """A model from the Hugging Face Hub, offline first (see ``llama_ffi.high.hub``)."""
        return cls(hub.download(repo_id, filename, additional_files, local_dir, cache_dir, revision), **kwargs)

    # ---- ownership -------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the model and its context, after the requests in flight end (streams end at once)."""
        if self._closed:
            return
        if self.engine is not None:
            self.engine.close()
        self._closed = True
        if self.engine is not None and self.engine.speculation is not None:
            self.engine.speculation.close()
        if self._batch is not None:
            self._batch.close()
        if self.mtmd is not None:
            self.mtmd.close()  # before the model it was made for
        if self._context is not None:
            self._context.close()
            self.adapters.close()  # before the model, which frees what is left of them
        self._model.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()

    def __enter__(self) -> Llama:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this Llama has been closed")

    @property
    def context(self) -> Context:
        self._check_open()
        if self._context is None:
            raise RuntimeError("this Llama was loaded with vocab_only=True: it has no context")
        return self._context

    # ---- facts -------------------------------------------------------------------------------------
    # n_ctx, n_vocab, n_embd: ints that can be called too (llama-cpp-python's methods)
    @property
    def n_ctx(self) -> compat.CallableInt:
        """Cells one request can fill: n_ctx, or its share of it with kv_unified=False."""
        return compat.CallableInt(self.context.n_ctx_seq)

    @property
    def n_vocab(self) -> compat.CallableInt:
        self._check_open()
        return compat.CallableInt(self._model.n_vocab)

    @property
    def n_embd(self) -> compat.CallableInt:
        self._check_open()
        return compat.CallableInt(self._model.n_embd)

    @property
    def supports_vision(self) -> bool:
        return self.mtmd is not None and self.mtmd.supports_vision

    @property
    def supports_audio(self) -> bool:
        return self.mtmd is not None and self.mtmd.supports_audio

    def pooling_type(self) -> int:
        return lib.llama_pooling_type(self.context.ptr)

    @property
    def loaded_model(self) -> Model:
        """The loaded model (its C pointer, vocabulary and facts), open as long as this Llama is."""
        self._check_open()
        return self._model

    @property
    def n_ctx_train(self) -> int:
        self._check_open()
        return self._model.n_ctx_train

    @property
    def metadata(self) -> dict[str, str]:
        self._check_open()
        return self._model.metadata()

    def _vocab_token(self, fn) -> int:
        self._check_open()
        return fn(self._model.vocab_ptr)

    def token_bos(self) -> int:
        return self._vocab_token(lib.llama_vocab_bos)

    def token_eos(self) -> int:
        return self._vocab_token(lib.llama_vocab_eos)

    def token_eot(self) -> int:
        return self._vocab_token(lib.llama_vocab_eot)

    def token_nl(self) -> int:
        return self._vocab_token(lib.llama_vocab_nl)

    def token_sep(self) -> int:
        return self._vocab_token(lib.llama_vocab_sep)

    def token_pad(self) -> int:
        return self._vocab_token(lib.llama_vocab_pad)

    # ---- tokenizer ---------------------------------------------------------------------------------
    def tokenize(self, text: str | bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        self._check_open()
        return self.tokenizer.tokenize(text, add_bos, special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None, special: bool = False
    ) -> bytes:
        """The text of ``tokens``; after ``prev_tokens`` when given (a leading space that only
        exists at the start of a text is then kept or dropped as in the whole text)."""
        self._check_open()
        if not prev_tokens:
            return self.tokenizer.detokenize(tokens, special)
        head = self.tokenizer.detokenize(list(prev_tokens), special)
        return self.tokenizer.detokenize(list(prev_tokens) + list(tokens), special)[len(head) :]

    # ---- evaluation ----------------------------------------------------------------------------------
    # ---- the main sequence (llama-cpp-python's single-sequence attributes) ----------------------------
    @property
    def main_slot(self) -> Slot:
        """The slot of the latest request: llama-cpp-python's single-sequence attributes
        (``tokens``, ``eval``, ``save_state``, ``scores``) are about it."""
        self.context  # noqa: B018 - a clear error for a closed or vocab_only Llama
        return self.engine.slots.main

    @property
    def main_seq(self) -> int:
        """The sequence of the main slot: the latest request's."""
        return self.main_slot.seq

    @property
    def last_speculative_stats(self) -> SpeculativeStats | None:
        """What the latest finished speculating sequence did (None before one, or without ``speculative``)."""
        speculation = self.engine.speculation if self.engine is not None else None
        return None if speculation is None else speculation.last_stats

    @property
    def tokens(self) -> list[int]:
        """What the main slot's KV cache holds (MEDIA_POSITION where media fill it)."""
        return self.main_slot.tokens

    @tokens.setter
    def tokens(self, value: list[int]) -> None:
        self.main_slot.tokens = value

    @property
    def media_spans(self) -> list[tuple[int, int, str]]:
        """(start, positions, media id) of the media in the main slot."""
        return self.main_slot.media_spans

    @media_spans.setter
    def media_spans(self, value) -> None:
        self.main_slot.media_spans = value

    @property
    def n_evaluated(self) -> int:
        """Tokens decoded so far, by every request (prefix reuse shows here)."""
        return self.counters.evaluated

    @n_evaluated.setter
    def n_evaluated(self, value: int) -> None:
        self.counters.evaluated = value

    def single(self, idle: bool = False):
        """``with llm.single():`` the main slot for single-sequence work, between the engine's steps
        (``idle``: once no request runs)."""
        self.context  # noqa: B018 - a clear error for a closed or vocab_only Llama
        return self.engine.exclusive(idle=idle)

    def reset(self) -> None:
        """Forget the KV cache (the next prompt is evaluated from scratch)."""
        with self.single():
            for slot in self.engine.slots.idle():
                self.engine.slots.forget(slot)

    def eval_prompt(self, prompt: Sequence[int]) -> None:
        """Make the main slot's cache hold exactly ``prompt``, evaluating only what is not cached."""
        with self.single():
            self.main_sequence.eval_prompt(prompt)

    def warm_up(self) -> None:
        """llama.cpp's warm-up at load (``Llama(..., warmup=True)``): decode BOS and EOS once and
        forget them, so that the first prompt does not pay for touching the weights."""
        with self.single(idle=True):
            self.main_sequence.warm_up()

    @property
    def memory_is_recurrent(self) -> bool:
        """Recurrent or hybrid memory: a cache that cannot be cut at a position."""
        return self._model.memory_is_recurrent

    def eval(self, tokens: Sequence[int]) -> None:
        """Evaluate ``tokens`` after what the cache already holds (llama-cpp-python's ``eval``)."""
        with self.single():
            self.main_sequence.eval(tokens)

    def logits(self) -> np.ndarray:
        """Zero-copy view of the logits of the last evaluated token."""
        return self.context.logits(-1)

    def sample(
        self, *, grammar: LlamaGrammar | None = None, logits_processor=None, idx: int | None = None, **sampling
    ) -> int:
        """Sample one token with a fresh sampler chain from the logits of the last evaluated
        token (``idx``: of that cached position, with ``logits_all=True``)."""
        compat.completion_options(sampling)
        with self.single():
            params = self.sampling_params(**sampling)
            chain = SamplerChain(params, self._model.vocab_ptr, self.n_vocab, self.n_ctx, grammar)
            try:
                chain.accept_prompt(self.tokens)
                output = -1
                if idx is not None and idx != len(self.tokens) - 1:
                    raise ValueError(
                        f"idx={idx}: only the last evaluated position ({len(self.tokens) - 1}) "
                        "has logits in the context; read others from llm.scores"
                    )
                for proc in _as_list(logits_processor):
                    logits = self.context.logits(output)
                    np.copyto(logits, proc(self.input_ids, logits))
                return chain.sample(self.context.ptr, output)
            finally:
                chain.close()

    def generate(
        self,
        tokens: Sequence[int],
        *,
        grammar: LlamaGrammar | None = None,
        logits_processor=None,
        stopping_criteria=None,
        max_tokens: int | None = None,
        reset: bool = True,
        active_loras=None,
        control_vector=None,
        **sampling,
    ) -> Iterator[int]:
        """Token iterator: evaluates ``tokens`` then yields sampled tokens until EOG / full context.
        ``reset=False`` continues after what the cache holds (``tokens`` follow it)."""
        compat.completion_options(sampling)
        if not flag("reset", reset):
            tokens = self.tokens + list(tokens)
        settings = completion.GenerationSettings(
            max_tokens=max_tokens,
            stop=[],
            sampling=self.sampling_params(**sampling),
            grammar=grammar,
            logits_processor=_as_list(logits_processor),
            stopping_criteria=_as_list(stopping_criteria),
            adapters=self.adapters.select(active_loras, control_vector),
            logits_all=self.logits_all,
        )
        return results.tokens(results.Call(self, [list(tokens)], 1, settings, [""], self.model_path, streamed=True))

    # ---- completion ------------------------------------------------------------------------------------
    def sampling_params(self, seed: int | None = None, **kw) -> SamplingParams:
        """A request's sampling settings from llama-cpp-python's keywords, with this Llama's seed and
        ``last_n_tokens_size`` as defaults."""
        return compat.sampling_params(self.seed, self.last_n_tokens_size, seed, **kw)

    def create_completion(
        self,
        prompt: str | bytes | Sequence[int],
        *,
        max_tokens: int | None = 16,
        stop: str | Sequence[str] | None = None,
        echo: bool = False,
        logprobs: int | None = None,
        stream: bool = False,
        grammar: LlamaGrammar | None = None,
        logits_processor=None,
        stopping_criteria=None,
        model: str | None = None,
        active_loras: Sequence[Mapping[str, object]] | None = None,
        control_vector=None,
        n: int = 1,
        suffix: str | None = None,
        **sampling,
    ):
        """OpenAI-shaped completion (a dict), or an iterator of chunks with ``stream=True``.
        ``model`` names the model in the result (default: its path). A list of prompts, or ``n`` >
        1, decodes all choices together; so do calls from several threads (``llama_ffi.high.engine``)."""
        self._check_open()
        request = completion.prepare(
            self,
            prompt,
            max_tokens=max_tokens,
            stop=stop,
            echo=echo,
            logprobs=logprobs,
            grammar=grammar,
            logits_processor=_as_list(logits_processor),
            stopping_criteria=_as_list(stopping_criteria),
            model=model,
            active_loras=active_loras,
            control_vector=control_vector,
            n=n,
            suffix=suffix,
            sampling=sampling,
        )
        return results.completion(results.Call(self, *request, streamed=stream))

    async def acreate_completion(self, prompt, *, stream: bool = False, **kwargs):
        """``create_completion`` for asyncio: awaits the dict, or with ``stream=True`` returns an
        async iterator of chunks; the event loop is never blocked, and cancelling the task frees its
        slot at the next step."""
        self._check_open()
        for name in ("logits_processor", "stopping_criteria"):
            kwargs[name] = _as_list(kwargs.get(name))
        known = set(completion.prepare.__kwdefaults__)
        request = completion.prepare(
            self,
            prompt,
            **{k: v for k, v in kwargs.items() if k in known},
            sampling={k: v for k, v in kwargs.items() if k not in known},
        )
        return await results.acompletion(results.Call(self, *request, streamed=stream))

    __call__ = create_completion

    def create_chat_completion(self, messages, **kwargs):
        """OpenAI-shaped chat completion (or chunks with ``stream=True``). The prompt comes from
        ``chat_handler``, else ``chat_format`` (llama.cpp's built-in formats), else the model's
        own template (``chat_template_name`` picks a named one), else ChatML."""
        from llama_ffi.high.chat.completion import create_chat_completion

        self._check_open()
        return create_chat_completion(self, messages, **kwargs)

    async def acreate_chat_completion(self, messages, **kwargs):
        """``create_chat_completion`` for asyncio (see ``acreate_completion``)."""
        from llama_ffi.high.chat.completion import acreate_chat_completion

        self._check_open()
        return await acreate_chat_completion(self, messages, **kwargs)

    # ---- embeddings and reranking (llama_ffi.high.embedding) ------------------------------------
    # llama-cpp-python's Llama.embed does not normalise unless asked; LlamaEmbedding does.
    DEFAULT_NORMALIZE: int | bool = False

    def embed(
        self,
        input: str | Sequence[str],
        normalize: int | bool | None = None,
        truncate: bool = True,
        return_count: bool = False,
    ):
        """Embeddings as lists of floats: one vector per input, or per token with pooling none.
        ``normalize``: see ``embedding.normalize`` (True: euclidean); default DEFAULT_NORMALIZE."""
        return embedding.embed(self, input, normalize, truncate, return_count)

    def create_embedding(
        self,
        input: str | Sequence[str],
        model: str | None = None,
        normalize: int | bool | None = None,
        truncate: bool = True,
        output_format: str = "json",
    ):
        """OpenAI-shaped embeddings. ``output_format``: "json" (the dict), "json+" (adds the cosine
        similarity matrix), "array" (list of vectors) or "numpy" (one 2-D array, pooled only)."""
        return embedding.create_embedding(self, input, model, normalize, truncate, output_format)

    def rank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One relevance score per document (a reranking model: pooling type rank)."""
        return embedding.rank(self, query, documents)

    # ---- llama-cpp-python's state and attributes ---------------------------------------------------
    def save_state(self, path: str | os.PathLike | None = None) -> compat.LlamaState | None:
        """The KV cache and its tokens: bytes (a LlamaState), or written to ``path`` (llama_ffi.high.state)."""
        return state.save(self, path)

    def load_state(self, saved: bytes | str | os.PathLike) -> None:
        state.load(self, saved)

    @property
    def n_tokens(self) -> int:
        """Tokens in the KV cache (llama-cpp-python's name)."""
        return len(self.tokens)

    @property
    def input_ids(self) -> np.ndarray:
        """The tokens in the KV cache as an ``intc`` array (llama-cpp-python's name)."""
        return np.asarray(self.tokens, dtype=np.intc)

    @property
    def scores(self) -> np.ndarray:
        """(n_tokens, n_vocab) logits of the cached positions (see ``compat.scores``)."""
        return compat.scores(self)

    def set_seed(self, seed: int) -> None:
        """The default seed of later requests (-1 or LLAMA_DEFAULT_SEED: a random one)."""
        self.seed = compat.checked_seed(seed)

    def set_cache(self, cache) -> None:
        """Keep what slots lose in ``cache`` (``LlamaRAMCache`` / ``LlamaDiskCache``; None: no cache)."""
        from llama_ffi.high.engine.prompt_cache import install

        install(self, cache)

    # ---- adapters (llama_ffi.high.adapters; the JamePeng fork's API) --------------------------------
    def load_lora(self, name: str, path: str | os.PathLike) -> None:
        """Load a LoRA adapter once; requests choose it with ``active_loras=[{"name": name, "scale": s}]``."""
        with self.lock:
            self.adapters.load(name, path)

    def unload_lora(self, name: str) -> None:
        """Free an adapter. An unfinished request or stream using it makes this an error."""
        with self.single():
            self.engine.slots.forget_adapter(name)  # caches computed under it are forgotten with it
            self.adapters.unload(name, self.context)

    @property
    def loras(self) -> dict[str, dict]:
        """name → {"path", "alpha", "metadata"} of every loaded adapter."""
        return self.adapters.info()

    def _forget_all(self) -> None:
        self.engine.slots.forget_all()


def _as_list(x) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]
