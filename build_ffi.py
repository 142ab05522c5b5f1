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

# Hand-written glue compiled into the module next to the generated bindings: the Python
# callbacks llama.cpp calls back into, and a C-level Ctrl-C flag that its abort callback can
# poll between graph nodes without taking the GIL.
GLUE_CDEF = """
extern "Python" void llama_ffi_on_log(enum ggml_log_level, const char *, void *);
extern "Python" bool llama_ffi_on_progress(float, void *);
bool llama_ffi_abort_requested(void *);
int llama_ffi_sigint_install(void);
void llama_ffi_sigint_restore(void);
void llama_ffi_sigint_clear(void);
int llama_ffi_sigint_pending(void);
int32_t llama_ffi_decode(struct llama_context *, struct llama_batch);
double llama_ffi_decode_seconds(void);
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
                             const float *, int32_t);
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


GLUE_C = r"""
/* dladdr: declared with _GNU_SOURCE, which Python.h (included first by cffi) defines */
#include <dlfcn.h>
#include <string.h>
/* The file a loaded function comes from (dladdr): the import guard checks libllama's, and
   build_info() names the CPU module that ggml chose. */
int llama_ffi_library_of(void * address, char * out, size_t size) {
    Dl_info info;
    if (address == NULL || !dladdr(address, &info) || info.dli_fname == NULL) return -1;
    strncpy(out, info.dli_fname, size - 1);
    out[size - 1] = 0;
    return 0;
}
int llama_ffi_libllama_path(char * out, size_t size) {
    return llama_ffi_library_of((void *)&llama_backend_init, out, size);
}
/* The GNU build ID of the loaded libllama, read from its notes in memory: the linker's hash of
   the library's contents, which patchelf and auditwheel (rewriting run paths) leave unchanged.
   Returns the ID's length, 0 when it has none, -1 where this cannot be read. */
#if defined(__linux__)
#include <link.h>
struct llama_ffi_note_search { const void * base; unsigned char * out; size_t size; int found; };
static int llama_ffi_find_build_id(struct dl_phdr_info * info, size_t n, void * data) {
    struct llama_ffi_note_search * s = data;
    (void)n;
    if ((const void *)info->dlpi_addr != s->base) return 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr) * ph = &info->dlpi_phdr[i];
        size_t align = ph->p_align == 8 ? 8 : 4;
        if (ph->p_type != PT_NOTE) continue;
        const char * p = (const char *)(info->dlpi_addr + ph->p_vaddr);
        const char * end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) * note = (const ElfW(Nhdr) *)p;
            const char * name = p + sizeof *note;
            const unsigned char * desc = (const unsigned char *)name + ((note->n_namesz + align - 1) & ~(align - 1));
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                size_t k = note->n_descsz < s->size ? note->n_descsz : s->size;
                memcpy(s->out, desc, k);
                s->found = (int)k;
                return 1;
            }
            p = (const char *)desc + ((note->n_descsz + align - 1) & ~(align - 1));
        }
    }
    return 1;
}
int llama_ffi_libllama_build_id(unsigned char * out, size_t size) {
    Dl_info info;
    if (!dladdr((void *)&llama_backend_init, &info)) return -1;
    struct llama_ffi_note_search search = { info.dli_fbase, out, size, 0 };
    dl_iterate_phdr(llama_ffi_find_build_id, &search);
    return search.found;
}
#else
int llama_ffi_libllama_build_id(unsigned char * out, size_t size) { (void)out; (void)size; return -1; }
#endif
#include <signal.h>
static volatile sig_atomic_t llama_ffi_sigint_flag = 0;
static struct sigaction llama_ffi_sigint_previous;
static int llama_ffi_sigint_installed = 0;

static void llama_ffi_sigint_handler(int signo) { (void)signo; llama_ffi_sigint_flag = 1; }

/* ggml_abort_callback: true stops the graph computation (llama_decode returns 2). */
bool llama_ffi_abort_requested(void * data) { (void)data; return llama_ffi_sigint_flag != 0; }

int llama_ffi_sigint_install(void) {
    struct sigaction sa;
    if (llama_ffi_sigint_installed) return 0;
    sa.sa_handler = llama_ffi_sigint_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    if (sigaction(SIGINT, &sa, &llama_ffi_sigint_previous) != 0) return -1;
    llama_ffi_sigint_installed = 1;
    return 0;
}
void llama_ffi_sigint_restore(void) {
    if (!llama_ffi_sigint_installed) return;
    sigaction(SIGINT, &llama_ffi_sigint_previous, NULL);
    llama_ffi_sigint_installed = 0;
}
void llama_ffi_sigint_clear(void) { llama_ffi_sigint_flag = 0; }
int llama_ffi_sigint_pending(void) { return llama_ffi_sigint_flag != 0; }

/* llama_decode, keeping a running total of the wall time spent inside it (two clock reads,
   ~50 ns): the benchmark's "time inside llama_decode". */
#include <time.h>
static double llama_ffi_decode_total = 0.0;
int32_t llama_ffi_decode(struct llama_context * ctx, struct llama_batch batch) {
    struct timespec t0, t1;
    int32_t rc;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = llama_decode(ctx, batch);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    llama_ffi_decode_total += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return rc;
}
double llama_ffi_decode_seconds(void) { return llama_ffi_decode_total; }

/* Greedy decoding's whole sampler: add the logit biases in place, return the first maximum.
   One pass over the logits, none of llama.cpp's candidate-array construction. The pass keeps the
   maximum of each block of 64 in SSE-width vectors (GCC/Clang vector extensions; 5x faster than a
   scalar compare-and-branch loop over a 49k vocabulary), then looks for the first index of the
   maximum inside the winning block only. */
typedef float llama_ffi_f4 __attribute__((vector_size(16)));
typedef int32_t llama_ffi_i4 __attribute__((vector_size(16)));
#define LLAMA_FFI_ARGMAX_BLOCK 64
static inline llama_ffi_f4 llama_ffi_vmax(llama_ffi_f4 a, llama_ffi_f4 b) {
    llama_ffi_i4 gt = a > b;
    return (llama_ffi_f4)(((llama_ffi_i4)a & gt) | ((llama_ffi_i4)b & ~gt));
}
static int32_t llama_ffi_first_max(const float * x, int32_t n) {
    float top = x[0];
    int32_t block = 0, i = 0, best = -1;
    for (; i + LLAMA_FFI_ARGMAX_BLOCK <= n; i += LLAMA_FFI_ARGMAX_BLOCK) {
        llama_ffi_f4 m[4], v;
        memcpy(m, x + i, sizeof m);
        for (int32_t j = i + 16; j < i + LLAMA_FFI_ARGMAX_BLOCK; j += 16) {
            for (int k = 0; k < 4; ++k) {
                memcpy(&v, x + j + 4 * k, sizeof v);
                m[k] = llama_ffi_vmax(v, m[k]);
            }
        }
        m[0] = llama_ffi_vmax(llama_ffi_vmax(m[0], m[1]), llama_ffi_vmax(m[2], m[3]));
        float bm = m[0][0];
        for (int k = 1; k < 4; ++k) if (m[0][k] > bm) bm = m[0][k];
        if (i == 0 || bm > top) { top = bm; block = i; }
    }
    for (int32_t j = block; j < block + LLAMA_FFI_ARGMAX_BLOCK && j < i; ++j) {
        if (x[j] == top) { best = j; break; }
    }
    if (best < 0) { best = 0; top = x[0]; }
    for (; i < n; ++i) if (x[i] > top) { top = x[i]; best = i; }
    return best;
}
int32_t llama_ffi_argmax(struct llama_context * ctx, int32_t idx, int32_t n_vocab,
                         const int32_t * ids, const float * bias, int32_t n_bias) {
    float * logits = llama_get_logits_ith(ctx, idx);
    if (logits == NULL || n_vocab <= 0) return -1;
    for (int32_t i = 0; i < n_bias; ++i) logits[ids[i]] += bias[i];
    return llama_ffi_first_max(logits, n_vocab);
}

/* Greedy generation of sequence `seq`: decode `token` at position `pos`, take the argmax of its
   logits (after the logit biases), decode that at the next position, ... `n` times or until an
   end-of-generation token. out[0..k) gets the k tokens produced (the last is not decoded); returns
   k. A failing decode stores its status in *status and ends the run (k counts the tokens produced
   before it). One call per run instead of a Python round trip per token. (llama.cpp's backend
   sampler would do the argmax inside the graph, but on a CPU it measured slower than this one pass
   over the logits.) */
int32_t llama_ffi_greedy_run(struct llama_context * ctx, const struct llama_vocab * vocab,
                             llama_token token, llama_pos pos, llama_seq_id seq, int32_t n,
                             llama_token * out, int32_t * status,
                             int32_t n_vocab, const int32_t * ids, const float * bias, int32_t n_bias) {
    llama_token cur = token;
    llama_pos at = pos;
    int32_t n_seq = 1;
    llama_seq_id seq_ids[1] = { seq };
    llama_seq_id * seq_of[1] = { seq_ids };
    int8_t output = 1;
    struct llama_batch batch = { .n_tokens = 1, .token = &cur, .embd = NULL, .pos = &at,
                                 .n_seq_id = &n_seq, .seq_id = seq_of, .logits = &output };
    *status = 0;
    for (int32_t i = 0; i < n; ++i) {
        int32_t rc = llama_ffi_decode(ctx, batch);
        if (rc != 0) { *status = rc; return i; }
        cur = llama_ffi_argmax(ctx, -1, n_vocab, ids, bias, n_bias);
        out[i] = cur;
        if (llama_vocab_is_eog(vocab, cur)) return i + 1;
        at += 1;
    }
    return n;
}
"""


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
        includes + build_info + GLUE_C + staging_c(),
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
    module = Path(ffi.compile(tmpdir=str(tmpdir), verbose=False))
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
