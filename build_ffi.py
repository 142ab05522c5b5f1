"""The cffi builder: llama.cpp headers → generated cdefs (``headers/``) → ``llama_ffi._lib``.

The cdefs are generated from the tree's headers by ``tools.gen`` and compiled in cffi's API
mode, so the C compiler checks every struct layout, enum value and prototype against the real
headers. Functions that no built library exports are left out of the compiled module and listed
in ``headers/coverage.md``.

Usage::

    python build_ffi.py --write      # regenerate headers/*.cdef from the pinned tree
    python build_ffi.py --check      # fail if headers/ differs from what the pinned tree generates
    python build_ffi.py --coverage   # print the coverage table (needs the built libraries)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO_ROOT))

from tools.gen import Bindings, GenerationError, generate  # noqa: E402
from tools.gen.coverage import measure  # noqa: E402
from tools.gen.headers import BOUND_HEADERS, include_dirs  # noqa: E402
from tools.gen.symbols import exported_functions, gnu_build_id, is_backend_module  # noqa: E402
from tools.vendor import Tree, materialise  # noqa: E402

HEADERS_DIR = REPO_ROOT / "headers"
MODULE_NAME = "llama_ffi._lib"
ABI3_MODULE_FILE = "_lib.abi3.so"

# The hand-written glue (glue/llama_ffi_glue.c) as cffi sees it: the Python callbacks llama.cpp
# calls back into (logs, load progress, the llguidance sampler's interface: high/constraints), the
# abort callback that polls a context's flag between graph nodes without taking the GIL, the timed
# decode, the greedy run, and the library checks of the import guard.
GLUE_CDEF = """
extern "Python" void llama_ffi_on_log(enum ggml_log_level, const char *, void *);
extern "Python" bool llama_ffi_on_progress(float, void *);
extern "Python" const char *llama_ffi_llg_name(const struct llama_sampler *);
extern "Python" void llama_ffi_llg_accept(struct llama_sampler *, llama_token);
extern "Python" void llama_ffi_llg_apply(struct llama_sampler *, llama_token_data_array *);
extern "Python" void llama_ffi_llg_reset(struct llama_sampler *);
extern "Python" struct llama_sampler *llama_ffi_llg_clone(const struct llama_sampler *);
extern "Python" void llama_ffi_llg_free(struct llama_sampler *);
bool llama_ffi_abort_requested(void *);
int32_t llama_ffi_decode(struct llama_context *, struct llama_batch);
double llama_ffi_decode_seconds(void);
int llama_ffi_release_threads(void);
int32_t llama_ffi_mask_candidates(llama_token_data_array *, const uint32_t *, size_t);
llama_token llama_ffi_sample_constrained(struct llama_sampler *, struct llama_sampler *, struct llama_context *,
                                         int32_t, llama_token_data *, int32_t);
int32_t llama_ffi_argmax(struct llama_context *, int32_t, int32_t, const int32_t *, const float *, int32_t);
static const char *const LLAMA_FFI_BUILD_COMMIT;
static const int LLAMA_FFI_BUILD_NUMBER;
static const char *const LLAMA_FFI_CDEF_SHA256;
static const char *const LLAMA_FFI_LIBRARY_ID;
static const int LLAMA_FFI_BACKEND_DL;
int llama_ffi_libllama_path(char *, size_t);
int llama_ffi_libllama_build_id(unsigned char *, size_t);
int llama_ffi_library_of(void *, char *, size_t);
int32_t llama_ffi_greedy_run(struct llama_context *, const struct llama_vocab *, llama_token, llama_pos,
                             llama_seq_id, int32_t, llama_token *, int32_t *, int32_t, const int32_t *,
                             const float *, int32_t, struct llama_sampler *, llama_token_data *);
llama_token llama_ffi_argmax_constrained(struct llama_context *, int32_t, int32_t, const int32_t *, const float *,
                                         int32_t, struct llama_sampler *, llama_token_data *);
#define LLAMA_FFI_NO_ALLOWED_TOKEN ...
"""

# llama.cpp's staging API (src/llama-ext.h) is C++ outside extern "C"; MTP drafting needs three
# of its functions. C reaches them by their Itanium-mangled names (asm labels), and the build
# checks the libraries export exactly these names, so a changed signature fails the build rather
# than a call. name -> (return type, parameters, mangled symbol).
STAGING_FUNCTIONS = {
    "llama_ffi_set_embeddings_nextn": (
        "void",
        "struct llama_context * ctx, bool value, bool masked",
        "_Z26llama_set_embeddings_nextnP13llama_contextbb",
    ),
    "llama_ffi_get_embeddings_nextn": (
        "float *",
        "struct llama_context * ctx",
        "_Z26llama_get_embeddings_nextnP13llama_context",
    ),
    "llama_ffi_get_embeddings_nextn_ith": (
        "float *",
        "struct llama_context * ctx, int32_t i",
        "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
    ),
}


def staging_cdef() -> str:
    return "".join(f"{ret} {name}({params});\n" for name, (ret, params, _) in STAGING_FUNCTIONS.items())


def staging_c() -> str:
    return "".join(
        f'{ret} {name}({params}) __asm__("{symbol}");\n' for name, (ret, params, symbol) in STAGING_FUNCTIONS.items()
    )


def check_staging_symbols(exported: set[str]) -> None:
    missing = [f"{name} ({symbol})" for name, (_, _, symbol) in STAGING_FUNCTIONS.items() if symbol not in exported]
    if missing:
        raise GenerationError(
            "libllama no longer exports the staging functions "
            + ", ".join(missing)
            + ": update STAGING_FUNCTIONS in build_ffi.py"
        )


GLUE_C_FILE = REPO_ROOT / "glue" / "llama_ffi_glue.c"  # the glue's C source, compiled into the module


def generate_for(tree: Tree) -> Bindings:
    return generate(tree.path, tree.label)


def write_headers(bindings: Bindings, out_dir: Path = HEADERS_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for header, text in bindings.files().items():
        path = out_dir / header.cdef_name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        written.append(path)
    return written


def stale_headers(bindings: Bindings, out_dir: Path = HEADERS_DIR) -> list[str]:
    """Names of committed cdef files that differ from what the tree generates."""
    stale = []
    for header, text in bindings.files().items():
        path = out_dir / header.cdef_name
        if not path.is_file() or path.read_text() != text:
            stale.append(path.name)
    return stale


def cdef_for_module(bindings: Bindings, exported: set[str]) -> str:
    return bindings.cdef(exported) + GLUE_CDEF + staging_cdef()


def library_fingerprint(lib_dir: Path) -> str:
    """What the import guard compares: ``build-id:HEX``, the GNU build ID of the libllama this
    module is linked against (it survives auditwheel's run-path rewrite), else ``sha256:HEX`` of
    the file."""
    path = lib_dir / "libllama.so"
    build_id = gnu_build_id(path)
    return f"build-id:{build_id}" if build_id else f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"


def libraries_in(lib_dir: Path) -> list[Path]:
    """The libraries the module links: every built one but the backend modules (a
    ``GGML_BACKEND_DL`` build), which ggml dlopens itself and picks among at run time."""
    return sorted(p for p in lib_dir.glob("lib*.so") if p.is_file() and not is_backend_module(p))


def has_backend_modules(lib_dir: Path) -> bool:
    return any(is_backend_module(p) for p in lib_dir.glob("lib*.so") if p.is_file())


def make_builder(bindings: Bindings, tree: Tree, lib_dir: Path, exported: set[str]):
    """The cffi builder; ``exported`` are the symbols the built libraries define."""
    import cffi

    libs = libraries_in(lib_dir)
    cdef = cdef_for_module(bindings, exported)
    digest = hashlib.sha256(cdef.encode()).hexdigest()
    includes = "".join(f'#include "{h.name}"\n' for h in BOUND_HEADERS)
    build_info = (
        f'static const char *const LLAMA_FFI_BUILD_COMMIT = "{tree.commit}";\n'
        f"static const int LLAMA_FFI_BUILD_NUMBER = {tree.build_number};\n"
        f'static const char *const LLAMA_FFI_CDEF_SHA256 = "{digest}";\n'
        f'static const char *const LLAMA_FFI_LIBRARY_ID = "{library_fingerprint(lib_dir)}";\n'
        f"static const int LLAMA_FFI_BACKEND_DL = {int(has_backend_modules(lib_dir))};\n"
    )
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(
        MODULE_NAME,
        includes + build_info + GLUE_C_FILE.read_text() + staging_c(),
        include_dirs=[str(d) for d in include_dirs(tree.path)],
        library_dirs=[str(lib_dir.resolve())],
        libraries=[p.name[3:-3] for p in libs],  # libggml-base.so -> ggml-base
        extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
        extra_compile_args=["-O2", "-Wno-unused-function", "-Wno-deprecated-declarations"],
    )
    return ffi


def compile_module(tree: Tree, lib_dir: Path, tmpdir: Path) -> Path:
    """Compile the extension, and write its ``.pyi`` stub beside it; return the module's path."""
    from tools.gen import stub
    from tools.gen.parse import TAG, TYPEDEF

    bindings = generate_for(tree)
    exported = set(exported_functions(libraries_in(lib_dir)))
    check_staging_symbols(exported)
    ffi = make_builder(bindings, tree, lib_dir, exported)
    built = Path(ffi.compile(tmpdir=str(tmpdir), verbose=False))
    # cffi names the file for this interpreter; its code uses only the limited API (cffi defines
    # Py_LIMITED_API), so it is named as such and every CPython from 3.9 imports the one file.
    module = built.with_name(ABI3_MODULE_FILE)
    os.replace(built, module)
    bound = [d for d in bindings.declarations if d.kind != "function" or d.name in exported]
    enumerators = sorted(_enumerator_names(d.node for d in bindings.declarations if d.kind in (TAG, TYPEDEF)))
    ints = enumerators + [c.name for c in bindings.constants if c.kind == "int"]
    module.with_name("_lib.pyi").write_text(stub.render(bound, ints, tree.label))
    return module


def _enumerator_names(nodes):
    from pycparser import c_ast

    names: list[str] = []

    class Visit(c_ast.NodeVisitor):
        def visit_Enumerator(self, node):
            names.append(node.name)

    for n in nodes:
        Visit().visit(n)
    return set(names)


def coverage_report(tree: Tree, lib_dir: Path) -> str:
    bindings = generate_for(tree)
    exported = set(exported_functions(libraries_in(lib_dir)))
    return measure(bindings.declarations, exported, bindings.constants).markdown(tree.label)


def main(argv: list[str] | None = None) -> int:
    from tools.native_build import DEFAULT_BUILD_DIR

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate headers/ from the tree")
    mode.add_argument("--check", action="store_true", help="fail if headers/ is stale")
    mode.add_argument("--coverage", action="store_true", help="print the coverage table")
    ap.add_argument("--lib-dir", type=Path, default=DEFAULT_BUILD_DIR / "bin")
    args = ap.parse_args(argv)
    try:
        tree = materialise()
        if args.coverage:
            report = coverage_report(tree, args.lib_dir)
            (HEADERS_DIR / "coverage.md").write_text(report)
            print(report)
            return 0
        bindings = generate_for(tree)
        if args.write:
            for path in write_headers(bindings):
                print(path.relative_to(REPO_ROOT))
            return 0
        stale = stale_headers(bindings)
        if stale:
            print(
                "headers/ is stale for this tree: "
                + ", ".join(stale)
                + "\nregenerate with: python build_ffi.py --write",
                file=sys.stderr,
            )
            return 1
        print(f"headers/ matches llama.cpp {tree.label[:12]}")
        return 0
    except (GenerationError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
