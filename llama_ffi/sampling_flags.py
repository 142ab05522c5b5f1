"""llama.cpp's sampling flags on the command lines (``llama-ffi complete``, ``chat``, ``serve``), read
from the sampling fields' declarations (``high.sampling_fields``)."""

from __future__ import annotations

from llama_ffi.high.sampling import SamplingParams
from llama_ffi.high.sampling_fields import FIELDS


def add_flags(parser) -> None:
    """llama.cpp's sampling flags on an ``argparse`` parser; unset ones stay None (the library's
    defaults, which are llama.cpp's, apply)."""
    defaults = SamplingParams()
    group = parser.add_argument_group("sampling (llama.cpp's flags and defaults)")
    for f in (f for f in FIELDS if f.flags):
        group.add_argument(
            *f.flags,
            dest=f"sampling_{f.name}",
            type=f.kind,
            default=None,
            help=f"{f.help} (default {getattr(defaults, f.name)})",
        )
    group.add_argument(
        "--dry-sequence-breaker",
        dest="sampling_dry_sequence_breakers",
        action="append",
        metavar="TEXT",
        help="a DRY sequence breaker (repeatable; default: newline, colon, quote, asterisk)",
    )
    group.add_argument(
        "-s",
        "--seed",
        dest="sampling_seed",
        type=int,
        default=None,
        metavar="N",
        help="random seed (-1 or unset: random)",
    )


def from_flags(args) -> dict:
    """The sampling keywords the flags of ``add_flags`` set."""
    prefix = "sampling_"
    return {k[len(prefix) :]: v for k, v in vars(args).items() if k.startswith(prefix) and v is not None}
