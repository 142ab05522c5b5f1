"""``Llama``: a model, one context and its KV cache, with llama-cpp-python's names.

It owns the model and the context (``close()``, ``with``, GC). Every generation request goes
through its engine (``llama_ffi.high.engine``), which decodes the requests of all threads
together; single-sequence work (``eval``, ``save_state``) is a task its loop runs between two steps.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

import numpy as np

from llama_ffi import lib
from llama_ffi._logging import enable_verbose_logging
from llama_ffi.high import compat, completion, embedding, hub, loading, multimodal, slot_files, state
from llama_ffi.high._checks import flag, integer
from llama_ffi.high.context import ClosedError, Context
from llama_ffi.high.engine import Engine, results
from llama_ffi.high.engine.slots import Slot
from llama_ffi.high.grammar import LlamaGrammar
from llama_ffi.high.model import Model
from llama_ffi.high.request import as_tuple, from_keywords
from llama_ffi.high.sampling import SamplingParams
from llama_ffi.high.seeds import SeedChain
from llama_ffi.high.speculative import SpeculativeStats

T = TypeVar("T")


class Llama:
    """A model and one context with llama-cpp-python's API; each capability lives in its module."""

    def __init__(self, model_path: str | os.PathLike, **params) -> None:
        """Load ``model_path`` with ``params``: llama-cpp-python's parameters (``ContextParams``,
        ``ModelParams`` and ``loading.LlamaParams`` declare them, with their defaults), or its other
        spellings (``compat.init_options``)."""
        self._closed = True
        p = loading.params(params)
        self.verbose = p.verbose
        mmproj_path, self.chat_handler, media_handler, self.template_arguments = multimodal.unpack_handler(
            p.chat_handler, p.mmproj_path, p.template_arguments
        )
        self.chat_format = p.chat_format
        self.chat_template = p.chat_template  # replaces the model's own (llama-server's --chat-template)
        self.spm_infill = p.spm_infill  # suffix= puts the suffix first
        self.logits_all = flag("logits_all", p.logits_all)
        self.last_n_tokens_size = integer("last_n_tokens_size", p.last_n_tokens_size, -1)
        compat.init_numa(p.numa)
        if p.verbose:
            enable_verbose_logging()
        self._seeds = SeedChain(p.seed)
        self.context_params = p.context.to_c()  # validated before the (slow) model load
        if p.speculative is not None:
            p.speculative.validate(self.context_params.n_batch)
        self.model_path = str(model_path)
        self.speculative = p.speculative
        self._parts = parts = loading.load(model_path, p, mmproj_path, media_handler)
        self._model, self.tokenizer, self.counters = parts.model, parts.tokenizer, parts.counters
        self.model_params = parts.model.params  # llama-cpp-python's attribute (the C struct)
        self._context, self._batch, self.mtmd = parts.context, parts.batch, parts.mtmd
        self.adapters, self.main_sequence = parts.adapters, parts.main_sequence
        self.engine: Engine | None = parts.engine  # None only with vocab_only (no context)
        if self._context is not None:
            self.context_params.n_ctx = self._context.n_ctx  # 0 meant "the model's": say which
        self._closed = False
        if p.warmup and self._context is not None:
            self.warm_up()

    from_pretrained = classmethod(hub.from_pretrained)  # a model from the Hugging Face Hub, offline first

    # ---- ownership -------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the model and its context, after the requests in flight end (streams end at once)."""
        if self._closed:
            return
        self._closed = True
        self._parts.close()

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
        """The ``Context`` that owns the ``llama_context`` (its ``ptr`` for the raw API; use it inside
        ``run_on_context``)."""
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
        """The vocabulary's size (an int that may also be called, as llama-cpp-python's method)."""
        self._check_open()
        return compat.CallableInt(self._model.n_vocab)

    @property
    def n_embd(self) -> compat.CallableInt:
        """The model's embedding width (an int that may also be called)."""
        self._check_open()
        return compat.CallableInt(self._model.n_embd)

    @property
    def supports_vision(self) -> bool:
        """Whether the projector (``mmproj_path``) takes images."""
        return self.mtmd is not None and self.mtmd.supports_vision

    @property
    def supports_audio(self) -> bool:
        """Whether the projector (``mmproj_path``) takes audio."""
        return self.mtmd is not None and self.mtmd.supports_audio

    def pooling_type(self) -> int:
        """The context's ``LLAMA_POOLING_TYPE_*`` (embeddings: none, mean, cls, last, rank)."""
        return lib.llama_pooling_type(self.context.ptr)

    @property
    def loaded_model(self) -> Model:
        """The loaded model (its C pointer, vocabulary and facts), open as long as this Llama is."""
        self._check_open()
        return self._model

    @property
    def n_ctx_train(self) -> int:
        """The context length the model was trained with."""
        self._check_open()
        return self._model.n_ctx_train

    @property
    def metadata(self) -> dict[str, str]:
        """The GGUF's metadata, every value as a string (llama.cpp's ``llama_model_meta_*``)."""
        self._check_open()
        return self._model.metadata()

    # llama-cpp-python's token_bos() ... token_pad(): the vocabulary's special tokens
    token_bos = compat.vocab_token(lib.llama_vocab_bos)
    token_eos = compat.vocab_token(lib.llama_vocab_eos)
    token_eot = compat.vocab_token(lib.llama_vocab_eot)
    token_nl = compat.vocab_token(lib.llama_vocab_nl)
    token_sep = compat.vocab_token(lib.llama_vocab_sep)
    token_pad = compat.vocab_token(lib.llama_vocab_pad)

    # ---- tokenizer ---------------------------------------------------------------------------------
    def tokenize(self, text: str | bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of ``text``; ``special`` parses control tokens written as text (``<|im_start|>``)."""
        self._check_open()
        return self.tokenizer.tokenize(text, add_bos, special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None, special: bool = False
    ) -> bytes:
        """The text of ``tokens``; after ``prev_tokens`` when given (a leading space that only
        exists at the start of a text is then kept or dropped as in the whole text)."""
        self._check_open()
        if prev_tokens:
            return self.tokenizer.detokenize_after(tokens, prev_tokens, special)
        return self.tokenizer.detokenize(tokens, special)

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

    @property
    def n_evaluated(self) -> int:
        """Tokens decoded so far, by every request (prefix reuse shows here)."""
        return self.counters.evaluated

    @n_evaluated.setter
    def n_evaluated(self, value: int) -> None:
        self.counters.evaluated = value

    def run_on_context(self, work: Callable[[], T], idle: bool = False) -> T:
        """``work()`` run by the engine's loop between two steps, with the main slot idle (``idle``:
        once no request runs): single-sequence work on the context. Returns what it returns."""
        self.context  # noqa: B018 - a clear error for a closed or vocab_only Llama
        return self.engine.run(work, idle=idle)

    def reset(self) -> None:
        """Forget the KV cache (the next prompt is evaluated from scratch)."""

        def forget_idle_slots() -> None:
            for slot in self.engine.slots.idle():
                self.engine.slots.forget(slot)

        self.run_on_context(forget_idle_slots)

    def eval_prompt(self, prompt: Sequence[int]) -> None:
        """Make the main slot's cache hold exactly ``prompt``, evaluating only what is not cached."""
        self.run_on_context(lambda: self.main_sequence.eval_prompt(prompt))

    def warm_up(self) -> None:
        """llama.cpp's warm-up at load (``Llama(..., warmup=True)``): decode BOS and EOS once and
        forget them, so that the first prompt does not pay for touching the weights."""
        self.run_on_context(self.main_sequence.warm_up, idle=True)

    @property
    def memory_is_recurrent(self) -> bool:
        """Recurrent or hybrid memory: a cache that cannot be cut at a position."""
        return self._model.memory_is_recurrent

    # llama-cpp-python's handles (addresses its ctypes functions take: llama_ffi.ctypes_view), valid
    # while this Llama is open; the C objects stay this Llama's. n_batch: the context's.
    model = property(lambda self: compat.address_of(self.loaded_model.ptr))
    ctx = property(compat.lent_context_address)
    n_batch = property(lambda self: self.context.n_batch)
    # llama-cpp-python's private flags, which code written for it reads
    _is_recurrent = compat.model_flag(lib.llama_model_is_recurrent)
    _is_hybrid = compat.model_flag(lib.llama_model_is_hybrid)

    def eval(self, tokens: Sequence[int], copy_logits: bool = True) -> None:
        """Evaluate ``tokens`` after what the cache already holds (llama-cpp-python's ``eval``).
        ``copy_logits`` (the fork's) is accepted either way: ``scores`` and ``logits()`` read the
        context's logits when asked, so nothing is copied after an eval."""
        flag("copy_logits", copy_logits)
        self.run_on_context(lambda: self.main_sequence.eval(tokens))

    def logits(self) -> np.ndarray:
        """Zero-copy view of the logits of the last evaluated token (taken in the engine's turn)."""
        context = self.context
        return self.engine.run(lambda: context.logits(-1), main=False)

    def sample(
        self, *, grammar: LlamaGrammar | None = None, logits_processor=None, idx: int | None = None, **sampling
    ) -> int:
        """Sample one token with a fresh sampler chain from the logits of the last evaluated
        token (``idx``: of that cached position, with ``logits_all=True``)."""
        compat.completion_options(sampling)
        params, processors, n_ctx = self.sampling_params(**sampling), list(as_tuple(logits_processor)), self.n_ctx
        return self.run_on_context(lambda: self.main_sequence.sample(params, grammar, processors, idx, n_ctx))

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
        adapters = self.adapters.select(active_loras, control_vector)
        settings = completion.token_settings(
            self, max_tokens, grammar, logits_processor, stopping_criteria, adapters, sampling
        )
        return results.tokens(results.Call(self, [list(tokens)], 1, settings, [""], self.model_path, streamed=True))

    # ---- completion ------------------------------------------------------------------------------------
    def sampling_params(self, seed: int | None = None, **kw) -> SamplingParams:
        """A request's sampling settings from llama-cpp-python's keywords (``compat.sampling_params``);
        without a ``seed``, the next of this Llama's seed chain (``seeds``)."""
        return compat.sampling_params(self._seeds.next(seed), self.last_n_tokens_size, self.tokenizer, **kw)

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
        return_progress: bool = False,
        slot_id: int | None = None,
        **sampling,
    ):
        """OpenAI-shaped completion (a dict), or an iterator of chunks with ``stream=True``.
        ``model`` names the model in the result (default: its path). A list of prompts, or ``n`` >
        1, decodes all choices together; so do calls from several threads (``llama_ffi.high.engine``).
        ``return_progress`` (llama-server's): a stream also has ``prompt_progress`` chunks (no
        choices) while its prompt is evaluated. ``slot_id`` (llama-server's ``id_slot``): the slot
        the prompt uses (its cache), waited for while busy; requests after it wait their turn."""
        self._check_open()
        options = dict(max_tokens=max_tokens, stop=stop, echo=echo, logprobs=logprobs, grammar=grammar, model=model)
        options.update(logits_processor=logits_processor, stopping_criteria=stopping_criteria, n=n, suffix=suffix)
        options.update(active_loras=active_loras, control_vector=control_vector, stream=stream)
        options.update(progress=return_progress, slot_id=slot_id)
        return results.complete(self, prompt, from_keywords(self, {**options, **sampling}))

    async def acreate_completion(
        self, prompt, *, stream: bool = False, return_progress: bool = False, slot_id: int | None = None, **kwargs
    ):
        """``create_completion`` for asyncio: awaits the dict, or with ``stream=True`` returns an
        async iterator of chunks; the event loop is never blocked, and cancelling the task frees its
        slot at the next step."""
        self._check_open()
        options = {**kwargs, "stream": stream, "progress": return_progress, "slot_id": slot_id}
        return await results.acomplete(self, prompt, from_keywords(self, options))

    __call__ = create_completion

    def create_chat_completion(self, messages, **kwargs):
        """OpenAI-shaped chat completion (or chunks with ``stream=True``). The prompt comes from
        ``chat_handler``, else ``chat_format`` (llama.cpp's built-in formats), else the model's
        own template (``chat_template_name`` picks a named one), else ChatML."""
        from llama_ffi.high.chat.completion import create_chat_completion

        self._check_open()
        return create_chat_completion(self, messages, **kwargs)

    def create_chat_completion_openai_v1(self, *args, **kwargs):
        """``create_chat_completion`` returning the ``openai`` package's typed objects: a
        ``ChatCompletion``, or an iterator of ``ChatCompletionChunk`` with ``stream=True``."""
        return compat.openai_v1(self.create_chat_completion(*args, **kwargs), kwargs.get("stream", False))

    async def acreate_chat_completion(self, messages, **kwargs):
        """``create_chat_completion`` for asyncio (see ``acreate_completion``)."""
        from llama_ffi.high.chat.completion import acreate_chat_completion

        self._check_open()
        return await acreate_chat_completion(self, messages, **kwargs)

    # ---- embeddings and reranking: llama_ffi.high.embedding's functions, as methods ---------------
    # llama-cpp-python's Llama.embed does not normalise unless asked; LlamaEmbedding does.
    DEFAULT_NORMALIZE: int | bool = False
    embed = embedding.embed
    create_embedding = embedding.create_embedding
    rank = embedding.rank

    # ---- llama-cpp-python's state and attributes ---------------------------------------------------
    def save_state(self, path: str | os.PathLike | None = None) -> compat.LlamaState | None:
        """The KV cache and its tokens: bytes (a LlamaState), or written to ``path`` (llama_ffi.high.state)."""
        return state.save(self, path)

    def load_state(self, saved: bytes | str | os.PathLike) -> None:
        """Restores what ``save_state`` returned or wrote (checked first: a damaged or foreign file is a
        ``ValueError`` naming the problem)."""
        state.load(self, saved)

    @property
    def slot_files(self) -> slot_files.SlotFiles:
        """One slot's cache in a file: ``save(i, path)``, ``restore(i, path)``, ``erase(i)``."""
        return slot_files.SlotFiles(self)

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
        self.context  # noqa: B018 - a clear error for a closed or vocab_only Llama
        return self.engine.run(lambda: compat.scores(self), main=False)

    def set_seed(self, seed: int) -> None:
        """Restart the seed chain that requests without a seed draw from (-1 or LLAMA_DEFAULT_SEED:
        every such request samples with a random seed)."""
        self._seeds.restart(seed)

    @property
    def seed(self) -> int:
        """Where the seed chain stands: the seed of the latest request (``save_state`` records it)."""
        return self._seeds.current

    def set_cache(self, cache) -> None:
        """Keep what slots lose in ``cache`` (``LlamaRAMCache`` / ``LlamaDiskCache``; None: no cache)."""
        from llama_ffi.high.engine.prompt_cache import install

        install(self, cache)

    # ---- adapters (llama_ffi.high.adapters; the JamePeng fork's API) --------------------------------
    def load_lora(self, name: str, path: str | os.PathLike) -> None:
        """Load a LoRA adapter once; requests choose it with ``active_loras=[{"name": name, "scale": s}]``."""
        self.run_on_context(lambda: self.adapters.load(name, path))

    def unload_lora(self, name: str) -> None:
        """Free an adapter. An unfinished request or stream using it makes this an error."""

        def unload() -> None:
            self.engine.slots.forget_adapter(name)  # caches computed under it are forgotten with it
            self.adapters.unload(name, self.context)

        self.run_on_context(unload)

    @property
    def loras(self) -> dict[str, dict]:
        """name → {"path", "alpha", "metadata"} of every loaded adapter."""
        return self.adapters.info()
