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
    draft_n_gpu_layers: int | None = None
    draft_n_min: int | None = None  # the shortest draft worth verifying (None: our CPU default, 3)
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
        return self.ngram_size_m if self.kind in NGRAM_TYPES else self.draft_n_max

    def validate(self, n_batch: int) -> None:
        """Raise before anything is loaded: unknown or unimplemented type, bad sizes, no file."""
        try:
            kind = self.kind
        except ValueError:
            names = ", ".join(t.name for t in SpeculativeType)
            raise RequestValueError(f"unknown speculative type {self.type!r} (one of {names})") from None
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
        if self.draft_n_gpu_layers is not None:
            integer("draft_n_gpu_layers", self.draft_n_gpu_layers, -1)
        # The verification batch is [last, draft...]: the draft must leave room for one token.
        name = "ngram_size_m" if kind in NGRAM_TYPES else "draft_n_max"
        if kind != SpeculativeType.NONE and self.max_draft >= n_batch:
            raise RequestValueError(
                f"{name} ({self.max_draft}) must be below n_batch ({n_batch}): the "
                f"verification batch holds the last token and the draft"
            )
        if kind == SpeculativeType.DRAFT and self.draft_model_path is None:
            raise RequestValueError("speculative type DRAFT needs draft_model_path (a GGUF with the same vocabulary)")
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
