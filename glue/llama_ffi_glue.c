/* Hand-written glue compiled into llama_ffi._lib next to the generated bindings (build_ffi.py
   reads this file; its declarations for cffi are build_ffi.GLUE_CDEF). llama.h and the other
   headers are included before it. */
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
/* ggml_abort_callback: true stops the graph computation (llama_decode returns 2). ``data`` is
   the context's abort flag: the engine raises it to stop a decode whose prompt nobody waits for
   any more (a cancelled request, Ctrl-C), and clears it before each decode. */
bool llama_ffi_abort_requested(void * data) { return data != NULL && *(volatile int32_t *)data != 0; }

/* llama_decode, keeping a running total of the wall time spent inside it (two clock reads,
   ~50 ns): the benchmark's "time inside llama_decode". Every Llama's loop thread adds to it, so
   the total is whole nanoseconds added atomically (a plain `+=` on a double loses updates). */
#include <time.h>
static uint64_t llama_ffi_decode_total_ns = 0;
int32_t llama_ffi_decode(struct llama_context * ctx, struct llama_batch batch) {
    struct timespec t0, t1;
    int32_t rc;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = llama_decode(ctx, batch);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int64_t ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (int64_t)(t1.tv_nsec - t0.tv_nsec);
    __atomic_fetch_add(&llama_ffi_decode_total_ns, (uint64_t)ns, __ATOMIC_RELAXED);
    return rc;
}
double llama_ffi_decode_seconds(void) {
    return 1e-9 * (double)__atomic_load_n(&llama_ffi_decode_total_ns, __ATOMIC_RELAXED);
}

/* Hands back the calling thread's OpenMP workers (libgomp, which ggml's CPU backend uses in the
   source build). libgomp keeps a team of workers for every thread that ran a parallel region, and
   once it manages more threads than there are CPUs, every `omp barrier` (ggml has one between
   graph nodes) stops spinning and sleeps in the kernel: one idle Llama whose loop had decoded
   halved another's generation speed on 2 cores. omp_pause_resource_all(omp_pause_soft) ends the
   calling thread's team (libgomp's pause only touches the caller's own pool); the next parallel
   region starts a new one. The runtime is looked up only if already loaded: libgomp (the source
   build's) or LLVM's libiomp5 (the wheel's; the same call). Returns -1 without either (a build
   without OpenMP), else the pause's result (0 on success). */
typedef int (*llama_ffi_omp_pause_fn)(int);
static llama_ffi_omp_pause_fn llama_ffi_omp_pause_all(void) {
    static void * found = NULL;  /* looked up again until a runtime is loaded; loops race benignly */
    void * fn = __atomic_load_n(&found, __ATOMIC_ACQUIRE);
    if (fn == NULL) {
        void * runtime = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (runtime == NULL) {
            runtime = dlopen("libiomp5.so", RTLD_LAZY | RTLD_NOLOAD);
        }
        fn = runtime == NULL ? NULL : dlsym(runtime, "omp_pause_resource_all");
        __atomic_store_n(&found, fn, __ATOMIC_RELEASE);
    }
    return (llama_ffi_omp_pause_fn)fn;
}
int llama_ffi_release_threads(void) {
    llama_ffi_omp_pause_fn pause_all = llama_ffi_omp_pause_all();
    return pause_all == NULL ? -1 : pause_all(1 /* omp_pause_soft */);
}

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
   over the logits.) With a `constraint` (NULL: none) each token is taken as
   llama_ffi_argmax_constrained takes it, `buf` holding n_vocab candidates; a constraint that allows
   nothing ends the run with LLAMA_FFI_NO_ALLOWED_TOKEN in *status. */
llama_token llama_ffi_argmax_constrained(struct llama_context * ctx, int32_t idx, int32_t n_vocab,
                                         const int32_t * ids, const float * bias, int32_t n_bias,
                                         struct llama_sampler * constraint, llama_token_data * buf);
#define LLAMA_FFI_NO_ALLOWED_TOKEN (-1000)
int32_t llama_ffi_greedy_run(struct llama_context * ctx, const struct llama_vocab * vocab,
                             llama_token token, llama_pos pos, llama_seq_id seq, int32_t n,
                             llama_token * out, int32_t * status,
                             int32_t n_vocab, const int32_t * ids, const float * bias, int32_t n_bias,
                             struct llama_sampler * constraint, llama_token_data * buf) {
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
        cur = constraint == NULL ? llama_ffi_argmax(ctx, -1, n_vocab, ids, bias, n_bias)
                                 : llama_ffi_argmax_constrained(ctx, -1, n_vocab, ids, bias, n_bias, constraint, buf);
        if (cur < 0) { *status = LLAMA_FFI_NO_ALLOWED_TOKEN; return i; }
        out[i] = cur;
        if (llama_vocab_is_eog(vocab, cur)) return i + 1;
        at += 1;
    }
    return n;
}
/* The llguidance sampler's apply (high/constraints/sampler.py): every candidate whose token the
   bitmask refuses (one bit per token, llguidance's layout; a token past its end is refused) gets
   -INFINITY. In C because it runs on every token over the whole vocabulary. Returns how many
   candidates stay allowed. */
#include <math.h>
int32_t llama_ffi_mask_candidates(llama_token_data_array * cur_p, const uint32_t * mask, size_t n_words) {
    int32_t allowed = 0;
    for (size_t i = 0; i < cur_p->size; ++i) {
        llama_token id = cur_p->data[i].id;
        if (id >= 0 && (size_t)(id >> 5) < n_words && ((mask[id >> 5] >> (id & 31)) & 1u)) {
            allowed++;
        } else {
            cur_p->data[i].logit = -INFINITY;
        }
    }
    return allowed;
}
/* Sampling under a constraint in llama.cpp's order (its common_sampler): the chain picks a token
   from the whole vocabulary as if unconstrained; only that token is put to the constraint (a
   one-candidate array, which the llguidance sampler checks without building its mask); where it
   is refused, the candidates are built again, the constraint masks them first and the chain
   picks among what is left. The token is accepted by both. `buf` holds n_vocab candidates.
   Returns -1 where llama.cpp has no logits at `idx` or the chain selects nothing, -2 where the
   constraint allows no token. */
static void llama_ffi_fill(llama_token_data * buf, const float * logits, int32_t n_vocab) {
    for (int32_t i = 0; i < n_vocab; ++i) {
        buf[i].id = i;
        buf[i].logit = logits[i];
        buf[i].p = 0.0f;
    }
}
llama_token llama_ffi_sample_constrained(struct llama_sampler * chain, struct llama_sampler * constraint,
                                         struct llama_context * ctx, int32_t idx, llama_token_data * buf,
                                         int32_t n_vocab) {
    const float * logits = llama_get_logits_ith(ctx, idx);
    if (logits == NULL) return -1;
    llama_ffi_fill(buf, logits, n_vocab);
    llama_token_data_array cur = { buf, (size_t)n_vocab, -1, false };
    llama_sampler_apply(chain, &cur);
    if (cur.selected < 0 || cur.selected >= (int64_t)cur.size) return -1;
    llama_token token = cur.data[cur.selected].id;
    llama_token_data single = { token, 1.0f, 0.0f };
    llama_token_data_array one = { &single, 1, -1, false };
    llama_sampler_apply(constraint, &one);
    if (isinf(single.logit)) {
        llama_ffi_fill(buf, logits, n_vocab);
        cur = (llama_token_data_array){ buf, (size_t)n_vocab, -1, false };
        llama_sampler_apply(constraint, &cur);
        llama_sampler_apply(chain, &cur);
        if (cur.selected < 0 || cur.selected >= (int64_t)cur.size) return -1;
        /* every candidate refused (by the constraint, or by a bias after it): the pick is one of them */
        if (isinf(cur.data[cur.selected].logit) && cur.data[cur.selected].logit < 0) return -2;
        token = cur.data[cur.selected].id;
    }
    llama_sampler_accept(constraint, token);
    llama_sampler_accept(chain, token);
    return token;
}
/* Greedy decoding under a constraint, in the same order: the argmax (after the biases) is put to
   the constraint alone; only where it is refused are the candidates built, masked by the
   constraint, and the best one left taken. The constraint accepts the token. Greedy chains skip
   building the n_vocab candidates for every token this way, as unconstrained ones do. Returns -1
   where there are no logits at `idx` or the constraint allows no token. */
llama_token llama_ffi_argmax_constrained(struct llama_context * ctx, int32_t idx, int32_t n_vocab,
                                         const int32_t * ids, const float * bias, int32_t n_bias,
                                         struct llama_sampler * constraint, llama_token_data * buf) {
    llama_token token = llama_ffi_argmax(ctx, idx, n_vocab, ids, bias, n_bias); /* biases now in the logits */
    if (token < 0) return -1;
    llama_token_data single = { token, 1.0f, 0.0f };
    llama_token_data_array one = { &single, 1, -1, false };
    llama_sampler_apply(constraint, &one);
    if (isinf(single.logit)) {
        llama_ffi_fill(buf, llama_get_logits_ith(ctx, idx), n_vocab);
        llama_token_data_array cur = { buf, (size_t)n_vocab, -1, false };
        llama_sampler_apply(constraint, &cur);
        float top = -INFINITY;
        token = -1;
        for (size_t i = 0; i < cur.size; ++i) {
            if (cur.data[i].logit > top) { top = cur.data[i].logit; token = cur.data[i].id; }
        }
        if (token < 0) return -1;
    }
    llama_sampler_accept(constraint, token);
    return token;
}
