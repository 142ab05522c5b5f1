"""Building a Llama (llama_ffi.high.loading): whatever step fails, what was made before it is freed
at once, in order, and the error names the problem."""

from __future__ import annotations

import pytest

from llama_ffi import ffi
from llama_ffi.high import Llama, loading
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
    assert LlamaParams().context.n_ctx == 512 and LlamaParams().seed == 0xFFFFFFFF  # llama-cpp-python's defaults
    with pytest.raises(TypeError, match="n_ctxx"):
        Llama(smollm2_path, n_ctxx=256)


def test_every_context_and_model_field_is_a_llama_keyword(smollm2_path):
    """Each field of ContextParams and ModelParams reaches its declaration from ``Llama(...)``, none
    restated (with a value unlike its default, so a field dropped on the way shows)."""
    context, model = loading.ContextParams(), loading.ModelParams()
    for name in loading.CONTEXT_FIELDS | loading.MODEL_FIELDS - loading.TRANSLATED:
        value = ("x", 7)  # any value: the routing, not the check, is under test here
        p = loading.params({name: value})
        where = p.context if name in loading.CONTEXT_FIELDS else p.model
        assert getattr(where, name) == value, name
    assert not (loading.OWN_FIELDS & (loading.CONTEXT_FIELDS | loading.MODEL_FIELDS))  # declared once
    assert context.n_ctx == 512 and model.vocab_only is False
    # fields the keyword list used to miss reach llama.cpp's struct
    with Llama(smollm2_path, n_ctx=256, n_outputs_max_per_seq=3, progress=False) as llm:
        assert llm.context_params.n_outputs_max_per_seq == 3
