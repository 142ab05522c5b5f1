"""The sampling parameters, declared once: each one's name (``SamplingParams``' field and the keyword
of ``create_completion``), type and bounds, llama-cpp-python's spelling, llama-server's JSON key and
llama.cpp's command-line flags. The library's checks, llama-cpp-python's aliases, the server's
request schema and defaults, and the command line's flags are all read from ``FIELDS``: a new
parameter is one more line here (and its sampler in ``sampling``).
"""

from __future__ import annotations

import dataclasses
import math

from llama_ffi.high._checks import integer, number


@dataclasses.dataclass(frozen=True)
class SamplingField:
    name: str
    kind: type  # int or float
    low: float | None = None
    high: float | None = None
    help: str = ""
    flags: tuple[str, ...] = ()  # llama.cpp's (the first is the one shown)
    wire: str | None = None  # llama-server's JSON key, where it differs from ``name``
    legacy: str | None = None  # llama-cpp-python's keyword, where it differs from ``name``
    # llama-server clamps a request's value into these bounds instead of refusing it
    clamped: bool = False

    @property
    def key(self) -> str:
        """The request body's key."""
        return self.wire or self.name

    def check(self, value):
        if self.kind is int:
            return integer(self.name, value, self.low, self.high)
        return number(self.name, value, self.low, self.high)

    def clamp(self, value):
        """A request's value as llama-server takes it: clamped where it clamps."""
        if not self.clamped or isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return value
        if self.low is not None and value < self.low:
            return self.kind(self.low)
        if self.high is not None and value > self.high:
            return self.kind(self.high)
        return value


F = SamplingField
FIELDS: tuple[SamplingField, ...] = (
    F(
        "temperature",
        float,
        0.0,
        None,
        "temperature; 0 = greedy",
        ("--temp", "--temperature"),
        legacy="temp",
        clamped=True,
    ),
    F("top_k", int, 0, None, "keep the K most probable tokens (0 = off)", ("--top-k",), clamped=True),
    F("top_p", float, 0.0, 1.0, "nucleus sampling (1 = off)", ("--top-p",), clamped=True),
    F("min_p", float, 0.0, 1.0, "minimum probability relative to the top token (0 = off)", ("--min-p",), clamped=True),
    F("typical_p", float, 0.0, 1.0, "locally typical sampling (1 = off)", ("--typical", "--typical-p")),
    F("min_keep", int, 0, None, "tokens each sampler keeps at least"),
    F("xtc_probability", float, 0.0, 1.0, "XTC: chance of removal (0 = off)", ("--xtc-probability",), clamped=True),
    F("xtc_threshold", float, 0.0, 1.0, "XTC: probability threshold", ("--xtc-threshold",), clamped=True),
    F("dynatemp_range", float, 0.0, None, "dynamic temperature range (0 = off)", ("--dynatemp-range",)),
    F("dynatemp_exponent", float, 0.0, None, "dynamic temperature exponent", ("--dynatemp-exp",)),
    F("top_n_sigma", float, None, None, "top-n-sigma (< 0 = off)", ("--top-nsigma", "--top-n-sigma")),
    F("adaptive_target", float, None, 1.0, "adaptive-p target (< 0 = off)", ("--adaptive-target",), clamped=True),
    F("adaptive_decay", float, 0.0, 0.99, "adaptive-p decay", ("--adaptive-decay",)),
    F("mirostat_mode", int, 0, 2, "Mirostat: 0 off, 1, 2", ("--mirostat",), "mirostat", "mirostat", clamped=True),
    F("mirostat_tau", float, 0.0, None, "Mirostat target entropy", ("--mirostat-ent",)),
    F("mirostat_eta", float, 0.0, None, "Mirostat learning rate", ("--mirostat-lr",)),
    F("repeat_penalty", float, 0.0, None, "repetition penalty (1 = off)", ("--repeat-penalty",)),
    F("frequency_penalty", float, None, None, "frequency penalty (0 = off)", ("--frequency-penalty",)),
    F("presence_penalty", float, None, None, "presence penalty (0 = off)", ("--presence-penalty",)),
    F(
        "penalty_last_n",
        int,
        -1,
        None,
        "tokens the penalties look back (-1 = context)",
        ("--repeat-last-n",),
        "repeat_last_n",
    ),
    F("dry_multiplier", float, 0.0, None, "DRY multiplier (0 = off)", ("--dry-multiplier",)),
    F("dry_base", float, 0.0, None, "DRY base", ("--dry-base",)),
    F("dry_allowed_length", int, 0, None, "DRY allowed length", ("--dry-allowed-length",)),
    F("dry_penalty_last_n", int, -1, None, "DRY look-back (-1 = context)", ("--dry-penalty-last-n",)),
)
BY_NAME = {f.name: f for f in FIELDS}
BY_KEY = {f.key: f for f in FIELDS}
LEGACY = {f.legacy: f.name for f in FIELDS if f.legacy}
