"""``SpecConfig`` and ``SpeculativeType``: what to speculate with, validated at construction.

The types and defaults follow llama.cpp's ``common_speculative_type`` and
``common_params_speculative`` (common/common.h) of the pinned tree, so a llama.cpp user finds the
same names. Only some types have an engine here; the others raise ``NotImplementedError``.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from pathlib import Path

from llama_ffi.high._checks import integer, number
from llama_ffi.high.errors import RequestValueError


class SpeculativeType(enum.Enum):
    NONE = "none"
    DRAFT = "draft"  # a separate small draft model (llama.cpp: DRAFT_SIMPLE)
    DRAFT_SIMPLE = "draft"  # the same: llama.cpp's and the JamePeng fork's name
    DRAFT_EAGLE3 = "draft-eagle3"
    DRAFT_MTP = "draft-mtp"  # the target's own NextN / multi-token-prediction layers
    DRAFT_DFLASH = "draft-dflash"
    DRAFT_DSPARK = "draft-dspark"
    NGRAM_SIMPLE = "ngram-simple"
    NGRAM_MAP_K = "ngram-map-k"  # n-gram keys; drafts the m tokens that followed the key
    NGRAM_MAP_K4V = "ngram-map-k4v"  # n-gram keys with up to 4 counted m-gram values
    NGRAM_MOD = "ngram-mod"
    NGRAM_CACHE = "ngram-cache"

    @classmethod
    def from_str(cls, text: str) -> SpeculativeType:
        """A type from its name or llama.cpp's flag spelling ("ngram-map-k", "DRAFT_MTP", ...)."""
        key = text.strip().lower().replace("_", "-")
        key = {"draft-simple": "draft"}.get(key, key)
        for member in cls:
            if member.value == key:
                return member
        raise RequestValueError(f"unknown speculative type {text!r} (one of {', '.join(m.value for m in cls)})")


IMPLEMENTED = frozenset(
    {
        SpeculativeType.NONE,
        SpeculativeType.DRAFT,
        SpeculativeType.DRAFT_MTP,
        SpeculativeType.NGRAM_MAP_K,
        SpeculativeType.NGRAM_MAP_K4V,
    }
)
NGRAM_TYPES = frozenset({SpeculativeType.NGRAM_MAP_K, SpeculativeType.NGRAM_MAP_K4V})
# drafters that are models of their own: a file is always needed (MTP may use the target's heads)
EXTERNAL_DRAFTERS = frozenset(
    {SpeculativeType.DRAFT, SpeculativeType.DRAFT_EAGLE3, SpeculativeType.DRAFT_DFLASH, SpeculativeType.DRAFT_DSPARK}
)


@dataclasses.dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding settings, passed as ``Llama(..., speculative=SpecConfig(...))``."""

    type: SpeculativeType | str = SpeculativeType.NGRAM_MAP_K
    spec_type: SpeculativeType | str | None = None  # the JamePeng fork's name for ``type``
    # n-gram map engines (llama.cpp's common_params_speculative_ngram_map defaults)
    ngram_size_n: int = 12  # key length: the last n tokens are looked up
    ngram_size_m: int = 48  # value length: at most m tokens are drafted
    ngram_min_hits: int = 1  # earlier occurrences of the key needed to draft
    ngram_max_entries_per_key: int = 4  # distinct values counted per key (k4v)
    # draft-model engines (common_params_speculative_draft defaults)
    draft_model_path: str | os.PathLike | None = None  # DRAFT: the draft GGUF; DRAFT_MTP: optional MTP file
    draft_n_max: int = 3
    draft_p_min: float = 0.0  # stop drafting when the draft's top probability is below
    draft_n_gpu_layers: int | str | None = None  # or llama.cpp's spellings "auto" and "all"
    draft_n_min: int | None = None  # the shortest draft worth verifying (None: our CPU default, 3)
    draft_n_threads: int | None = None  # the draft context's threads (None: the target's)
    draft_n_threads_batch: int | None = None
    draft_n_cpu_moe: int = 0  # MoE layers kept on the CPU: only 0 here (a CPU drafter keeps them all)
    draft_p_split: float = 0.1  # llama.cpp's tree split, which its drafters no longer use: 0.1 only
    ngram_mod_n_max: int = 64  # NGRAM_MOD's longest draft (the type itself has no engine here)
    # the fork's: sample drafts in llama.cpp's backend. Drafts here are always a CPU argmax; the
    # output is the same either way, so True and False are both accepted.
    draft_backend_sampling: bool = False

    def __post_init__(self) -> None:
        if self.spec_type is not None:
            object.__setattr__(self, "type", self.spec_type)

    @property
    def kind(self) -> SpeculativeType:
        return self.type if isinstance(self.type, SpeculativeType) else SpeculativeType.from_str(self.type)

    @property
    def max_draft(self) -> int:
        """The longest draft this configuration can produce."""
        if self.kind == SpeculativeType.NGRAM_MOD:
            return self.ngram_mod_n_max
        return self.ngram_size_m if self.kind in NGRAM_TYPES else self.draft_n_max

    def max_draft_tokens(self) -> int:
        """The longest draft of this type (the fork's name for ``max_draft``)."""
        return self.max_draft

    def resolved_draft_n_gpu_layers(self) -> int:
        """``draft_n_gpu_layers`` as llama.cpp's number: "auto" -1, "all" -2 (None: auto)."""
        value = self.draft_n_gpu_layers
        if value is None or value == "auto":
            return -1
        if value == "all":
            return -2
        return integer("draft_n_gpu_layers", value, -2)

    def validate(self, n_batch: int | None = None) -> None:
        """Raise before anything is loaded: unknown or unimplemented type, bad sizes, no file.
        ``n_batch``: the target context's, which a draft must leave room in (checked when given)."""
        try:
            kind = self.kind
        except ValueError:
            names = ", ".join(t.name for t in SpeculativeType)
            raise RequestValueError(f"unknown speculative type {self.type!r} (one of {names})") from None
        if kind in EXTERNAL_DRAFTERS and self.draft_model_path is None:
            missing_engine = "" if kind in IMPLEMENTED else ", and llama-ffi has no engine for it"
            raise RequestValueError(
                f"speculative type {kind.name} needs draft_model_path (its drafter's GGUF){missing_engine}"
            )
        if kind not in IMPLEMENTED:
            raise NotImplementedError(
                f"speculative type {kind.name} has no engine in llama-ffi "
                f"(implemented: NGRAM_MAP_K, NGRAM_MAP_K4V, DRAFT, DRAFT_MTP)"
            )
        integer("ngram_size_n", self.ngram_size_n, 1, 1024)
        integer("ngram_size_m", self.ngram_size_m, 1, 1024)
        integer("ngram_min_hits", self.ngram_min_hits, 1)
        integer("ngram_max_entries_per_key", self.ngram_max_entries_per_key, 1, 64)
        integer("draft_n_max", self.draft_n_max, 1)
        if self.draft_n_min is not None:
            integer("draft_n_min", self.draft_n_min, 0, self.draft_n_max)
        number("draft_p_min", self.draft_p_min, 0.0, 1.0)
        if isinstance(self.draft_n_gpu_layers, str) and self.draft_n_gpu_layers not in ("auto", "all"):
            raise RequestValueError(
                f"draft_n_gpu_layers must be an int, 'auto' or 'all', got {self.draft_n_gpu_layers!r}"
            )
        self.resolved_draft_n_gpu_layers()
        for name in ("draft_n_threads", "draft_n_threads_batch"):
            if getattr(self, name) is not None:
                integer(name, getattr(self, name), 1)
        if integer("draft_n_cpu_moe", self.draft_n_cpu_moe, 0) != 0:
            raise RequestValueError(
                "draft_n_cpu_moe > 0 is not supported: the draft model's layers follow draft_n_gpu_layers"
            )
        if number("draft_p_split", self.draft_p_split, 0.0, 1.0) != 0.1:
            raise RequestValueError("draft_p_split is not supported: llama.cpp's drafters no longer split into trees")
        integer("ngram_mod_n_max", self.ngram_mod_n_max, 1, 1024)
        # The verification batch is [last, draft...]: the draft must leave room for one token.
        name = "ngram_size_m" if kind in NGRAM_TYPES else "draft_n_max"
        if n_batch is not None and kind != SpeculativeType.NONE and self.max_draft >= n_batch:
            raise RequestValueError(
                f"{name} ({self.max_draft}) must be below n_batch ({n_batch}): the "
                f"verification batch holds the last token and the draft"
            )
        if self.draft_model_path is not None and kind in (SpeculativeType.DRAFT, SpeculativeType.DRAFT_MTP):
            path = Path(self.draft_model_path)
            if not path.is_file():
                raise FileNotFoundError(f"draft model not found: {path}")


def type_from_file(path: str | os.PathLike) -> SpeculativeType | None:
    """The speculative type a draft GGUF implies, by llama.cpp's rule when ``--spec-type`` is left
    out (``common_speculative_types_from_gguf``): DFlash / DSpark by architecture, MTP where the
    last layer holds a NextN block; None for an ordinary draft model or an unreadable file."""
    from llama_ffi.high.validate import open_header  # reads the header through ggml, no tensor data

    with open_header(Path(path)) as header:
        if header is None:
            return None
        arch = header.string("general.architecture")
        if arch is None:
            return None
        if arch == "dflash":
            markov = any(name == "markov_w1.weight" for name, _, _ in header.tensors())
            return SpeculativeType.DRAFT_DSPARK if markov else SpeculativeType.DRAFT_DFLASH
        layers = header.integer(f"{arch}.block_count")
        if layers is None or layers < 1:
            return None
        nextn = f"blk.{layers - 1}.nextn.eh_proj.weight"
        return SpeculativeType.DRAFT_MTP if any(name == nextn for name, _, _ in header.tensors()) else None
