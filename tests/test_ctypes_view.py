"""The ctypes view of the C API (``llama_ffi.ctypes_view``, llama-cpp-python's ``llama_cpp.llama_cpp``
names) agrees with the cffi module the C compiler checked: every struct's and union's size,
alignment and field offsets, every function's argument and result sizes; and one C object is
usable from both layers."""

from __future__ import annotations

import ctypes

import pytest

from llama_ffi import ffi, lib
from llama_ffi.ctypes_view import VIEW, c_type, function_names, is_complete
from llama_ffi.high import Llama


def records() -> list[str]:
    typedefs, structs, unions = ffi.list_types()
    names = [f"struct {s}" for s in structs] + [f"union {u}" for u in unions]
    names += [t for t in typedefs if ffi.typeof(t).kind in ("struct", "union")]
    return [n for n in names if is_complete(ffi.typeof(n))]


def layout_mismatches(name: str) -> list[str]:
    ctype = ffi.typeof(name)
    view = VIEW.type_of(ctype)
    out = []
    if ctypes.sizeof(view) != ffi.sizeof(ctype) or ctypes.alignment(view) != ffi.alignof(ctype):
        out.append(
            f"{name}: size/alignment {ctypes.sizeof(view)}/{ctypes.alignment(view)}, C has "
            f"{ffi.sizeof(ctype)}/{ffi.alignof(ctype)}"
        )
    for field, info in ctype.fields:
        if info.bitsize < 0 and getattr(view, field).offset != info.offset:
            out.append(f"{name}.{field}: offset {getattr(view, field).offset}, C has {info.offset}")
    return out


def test_every_record_has_the_compilers_layout():
    names = records()
    assert len(names) > 55  # llama.h's, ggml's, gguf's and mtmd's complete structs
    mismatches = [m for name in names for m in layout_mismatches(name)]
    assert not mismatches, "\n".join(mismatches)


def test_every_function_is_typed_as_the_c_api_declares():
    wrong = []
    names = function_names()
    assert len(names) > 900
    for name in names:
        ctype = ffi.typeof(getattr(lib, name))
        if ctype.ellipsis:
            continue  # ctypes cannot type a variable argument list (ggml_abort, ggml_format_name)
        function = VIEW.function(name)
        if function is None:
            wrong.append(f"{name}: no loaded library exports it")
            continue
        declared = [*ctype.args, ctype.result]
        viewed = [*function.argtypes, function.restype]
        for c, view in zip(declared, viewed):
            size = 0 if c.kind == "void" else ffi.sizeof(c)
            if (0 if view is None else ctypes.sizeof(view)) != size:
                wrong.append(f"{name}: {c.cname} is {size} bytes, its ctypes type {view} is not")
    assert not wrong, "\n".join(wrong[:20])


def test_a_layout_mismatch_is_caught():
    """The check fails on a view whose field is of the wrong width."""
    ctype = ffi.typeof("struct llama_model_params")
    wrong = type("llama_model_params", (ctypes.Structure,), {})
    fields = [(n, VIEW.type_of(f.type)) for n, f in ctype.fields]
    fields[2] = (fields[2][0], ctypes.c_int64)  # n_gpu_layers is int32_t
    wrong._fields_ = fields
    assert ctypes.sizeof(wrong) != ffi.sizeof(ctype) or wrong.split_mode.offset != ffi.offsetof(ctype, "split_mode")


def test_names_as_llama_cpp_python_spells_them():
    assert VIEW.named("llama_token") is ctypes.c_int32 or ctypes.sizeof(VIEW.named("llama_token")) == 4
    assert VIEW.named("llama_batch_p")._type_ is VIEW.named("llama_batch")
    assert VIEW.named("llama_model_p") is ctypes.c_void_p is VIEW.named("llama_vocab_p_ctypes")
    assert VIEW.named("LLAMA_DEFAULT_SEED") == lib.LLAMA_DEFAULT_SEED
    assert VIEW.named("llama_ffi_library_of") is None  # the cffi module's glue is not llama.cpp's API
    assert c_type("no_such_type") is None


def test_struct_results_match_cffis():
    viewed = VIEW.function("llama_model_default_params")()
    native = lib.llama_model_default_params()
    for name in ("n_gpu_layers", "load_mode", "main_gpu", "vocab_only", "check_tensors"):
        assert getattr(viewed, name) == getattr(native, name), name
    context = VIEW.function("llama_context_default_params")()
    assert context.n_ctx == lib.llama_context_default_params().n_ctx


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(smollm2_path, n_ctx=256, n_threads=2, progress=False) as model:
        yield model


def test_one_object_two_views(llm):
    """Handles of the Llama (llama-cpp-python's ``Llama.model``/``ctx``) drive the ctypes functions;
    what they read is what the cffi layer reads."""
    vocab = VIEW.function("llama_model_get_vocab")(llm.model)
    assert vocab == int(ffi.cast("uintptr_t", llm.loaded_model.vocab_ptr))
    assert VIEW.function("llama_vocab_n_tokens")(vocab) == llm.n_vocab()
    assert VIEW.function("llama_n_ctx")(llm.ctx) == llm.context.n_ctx and llm.n_batch == llm.context.n_batch
    token = llm.tokenize(b" Paris", add_bos=False)[0]
    buffer = ctypes.create_string_buffer(32)  # outlines reads pieces this way
    n = VIEW.function("llama_token_to_piece")(vocab, token, buffer, 32, 0, False)
    assert buffer.raw[:n] == llm.tokenizer.piece(token)
    text = b"Hello, world"
    tokens = (ctypes.c_int32 * 16)()
    n = VIEW.function("llama_tokenize")(vocab, text, len(text), tokens, 16, True, False)
    assert list(tokens[:n]) == llm.tokenize(text)


def test_what_ctypes_code_decodes_into_a_lent_context_never_answers_the_llama(smollm2_path):
    """guidance decodes through ``Llama.ctx`` into sequence 0, which the Llama's first slot uses:
    afterwards the Llama's own requests do not take those cells for their cached prompt."""
    prompt = "The capital of France is"
    with Llama(smollm2_path, n_ctx=256, n_threads=2, n_seq_max=1, progress=False) as llm:
        want = llm(prompt, max_tokens=6, temperature=0)["choices"][0]["text"]
        ctx = llm.ctx  # lent from here on
        cached = llm.tokens  # what the slot holds: the prompt and its answer
        other = llm.tokenize(b"Completely different words fill these very same positions now, one by one")
        other = (other * 4)[: len(cached)]  # as many cells as the slot believes it holds
        memory = VIEW.named("llama_get_memory")(ctx)
        VIEW.named("llama_memory_seq_rm")(memory, -1, 0, -1)
        tokens = (ctypes.c_int32 * len(other))(*other)
        assert VIEW.named("llama_decode")(ctx, VIEW.named("llama_batch_get_one")(tokens, len(other))) == 0
        assert llm(prompt, max_tokens=6, temperature=0)["choices"][0]["text"] == want
