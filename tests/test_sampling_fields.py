"""The sampling parameters are declared once (``sampling_fields``): every SamplingParams field is
there, and its flags and server keys are those of the pinned llama.cpp (they move with a bump)."""

from __future__ import annotations

import re

import pytest

from llama_ffi.cli import build_parser
from llama_ffi.high import Llama
from llama_ffi.high.sampling import SamplingParams
from llama_ffi.high.sampling_fields import FIELDS


def test_every_sampling_parameter_is_declared():
    declared = {f.name for f in FIELDS}
    assert declared | {"seed", "dry_sequence_breakers", "logit_bias"} == set(SamplingParams.__dataclass_fields__)


def test_flags_and_keys_are_llama_cpps(tree):
    arg_cpp = (tree.path / "common" / "arg.cpp").read_text()
    schema_cpp = (tree.path / "tools" / "server" / "server-schema.cpp").read_text()
    for f in FIELDS:
        for flag in f.flags:
            assert f'"{flag}"' in arg_cpp, flag
        assert re.search(rf'field_num\("{f.key}"', schema_cpp), f.key


def test_the_command_line_sets_what_it_names():
    args = build_parser().parse_args(
        ["complete", "hi", "--temp", "0.25", "--top-k", "7", "--mirostat", "2", "--repeat-last-n", "-1", "-s", "3"]
    )
    from llama_ffi.sampling_flags import from_flags

    assert from_flags(args) == {
        "temperature": 0.25,
        "top_k": 7,
        "mirostat_mode": 2,
        "penalty_last_n": -1,
        "seed": 3,
    }


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [("top_p", 1.5, "top_p must be <= 1.0"), ("mirostat", 3, "mirostat_mode must be <= 2"), ("min_keep", -1, ">= 0")],
)
def test_the_library_refuses_out_of_bounds_by_name(smollm2_path, name, value, message):
    with Llama(smollm2_path, n_ctx=128, progress=False) as llm:
        with pytest.raises(ValueError, match=message):
            llm.create_completion("hi", max_tokens=1, **{name: value})
