"""The generator: committed cdefs are current, coverage is complete, unknown constructs fail loudly."""

from __future__ import annotations

from pathlib import Path

import pytest
from header_copies import copy_headers, insert_before_closing

import build_ffi
from llama_ffi import lib
from tools.gen import GenerationError, generate
from tools.gen.parse import FUNCTION
from tools.native_build import DEFAULT_BUILD_DIR


def test_committed_headers_match_the_pinned_tree(tree):
    assert build_ffi.stale_headers(build_ffi.generate_for(tree)) == []


def test_coverage_binds_every_exported_function(tree, capsys):
    from tools.gen.coverage import measure
    from tools.gen.symbols import exported_functions

    bindings = build_ffi.generate_for(tree)
    libs = build_ffi.libraries_in(Path(lib.__file__).parent / "lib") if hasattr(lib, "__file__") else []
    libs = libs or build_ffi.libraries_in(DEFAULT_BUILD_DIR / "bin")
    exported = set(exported_functions(libs))
    cov = measure(bindings.declarations, exported, bindings.constants)
    print(cov.markdown(tree.label))
    assert cov.exported_bound_ratio == 1.0
    assert [u[0] for u in cov.unbound] == ["ggml_threadpool_get_n_threads"]
    # and "bound" means callable: every exported declared function is an attribute of lib
    missing = [d.name for d in bindings.functions() if d.name in exported and not hasattr(lib, d.name)]
    assert missing == []
    assert len({d.name for d in bindings.functions()}) > 900


def test_function_body_in_a_header_fails_with_file_and_line(tree, tmp_path):
    root = copy_headers(tree, tmp_path)
    line = insert_before_closing(root / "include/llama.h", "static inline int llama_ffi_probe(void) { return 1; }")
    with pytest.raises(GenerationError, match=rf"include/llama.h:{line}: .*FuncDef"):
        generate(root, "test")


def test_unparseable_declaration_fails_with_file_and_line(tree, tmp_path):
    root = copy_headers(tree, tmp_path)
    line = insert_before_closing(root / "ggml/include/gguf.h", "int gguf_broken(int x, ;")
    with pytest.raises(GenerationError, match=rf"ggml/include/gguf.h:{line}"):
        generate(root, "test")


def test_unknown_system_header_fails_naming_it(tree, tmp_path):
    root = copy_headers(tree, tmp_path)
    insert_before_closing(root / "include/llama.h", "#include <pthread.h>")
    with pytest.raises(GenerationError, match="pthread.h"):
        generate(root, "test")


def test_new_declaration_appears_in_cdef(tree, tmp_path):
    root = copy_headers(tree, tmp_path)
    insert_before_closing(root / "include/llama.h", "LLAMA_API int32_t llama_ffi_new_function(const char * name);")
    files = generate(root, "test").files()
    llama = next(text for h, text in files.items() if h.name == "llama.h")
    assert "int32_t llama_ffi_new_function(const char *name);" in llama


def test_generated_cdef_is_what_the_module_was_compiled_from(tree):
    import hashlib

    from tools.gen.symbols import exported_functions

    bindings = build_ffi.generate_for(tree)
    exported = set(exported_functions(build_ffi.libraries_in(DEFAULT_BUILD_DIR / "bin")))
    cdef = build_ffi.cdef_for_module(bindings, exported)
    import llama_ffi

    assert llama_ffi.build_info()["cdef_sha256"] == hashlib.sha256(cdef.encode()).hexdigest()
    assert all(d.kind != FUNCTION or d.name in cdef for d in bindings.declarations if d.name in exported)


def test_stub_lists_every_bound_function_with_its_prototype():
    import ast

    import llama_ffi._lib as module

    stub = Path(module.__file__).with_name("_lib.pyi")
    tree = ast.parse(stub.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_Lib")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert set(methods) >= {"llama_decode", "llama_tokenize", "ggml_init", "gguf_init_from_file"}
    assert all(hasattr(lib, name) for name in methods)
    assert ast.get_docstring(methods["llama_decode"]).startswith("int32_t llama_decode(")
    assert [a.arg for a in methods["llama_tokenize"].args.args][:3] == ["self", "vocab", "text"]
