"""Building a Llama (llama_ffi.high.loading): whatever step fails, what was made before it is freed
at once, in order, and the error names the problem."""

from __future__ import annotations

import pytest

from llama_ffi import ffi
from llama_ffi.high import Llama
from llama_ffi.high.loading import LlamaParams, Parts


def _parts_of(error: BaseException) -> Parts:
    """The parts ``loading.load`` was making when ``error`` left it (its frame's local)."""
    tb = error.__traceback__
    while tb is not None:
        if isinstance(tb.tb_frame.f_locals.get("parts"), Parts):
            return tb.tb_frame.f_locals["parts"]
        tb = tb.tb_next
    raise AssertionError("the error did not come from loading.load")


@pytest.mark.parametrize("step", ["mmproj_path", "lora_path"])
def test_a_part_that_fails_to_load_leaves_nothing_allocated(smollm2_path, tmp_path, step):
    bad = tmp_path / "not-a-gguf.gguf"
    bad.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    with pytest.raises(ValueError) as info:
        Llama(smollm2_path, n_ctx=256, progress=False, **{step: bad})
    assert "not-a-gguf" in str(info.value) or "gguf" in str(info.value).lower()
    parts = _parts_of(info.value)
    assert parts.context is not None and parts.batch is not None  # made before the failing step
    assert parts.context._ptr == ffi.NULL and parts.model._ptr == ffi.NULL  # and freed, not left to GC
    assert not parts.batch._alive
    assert parts.engine is None


def test_parameters_are_declared_once_and_unknown_ones_are_named(smollm2_path):
    assert LlamaParams().n_ctx == 512 and LlamaParams().seed == 0xFFFFFFFF  # llama-cpp-python's defaults
    with pytest.raises(TypeError, match="n_ctxx"):
        Llama(smollm2_path, n_ctxx=256)
