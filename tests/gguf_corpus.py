"""A corpus of damaged GGUF files, mutated from the tiny llama, and a crash-safe way to load them.

Each mutation is one named function of a clean file's parts (metadata, tensors) or of its bytes:
counts, huge lengths, types, shapes, offsets, hyper-parameters, tokenizer metadata, truncations
and seeded byte flips. ``load_all`` loads every file in a worker subprocess (load, then generate two
tokens, since some damage only shows at the first decode) and reports per file: "loaded", "error"
(a Python exception, with its message), "crash" (the worker died) or "hang" (no answer in time).
"""

from __future__ import annotations

import dataclasses
import os
import select
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tiny_llama import TinyConfig, vocabulary, weights

ARCH = "llama"


@dataclasses.dataclass
class Parts:
    """What a GGUF file is made of: metadata (key -> (value, GGUFValueType name)) and tensors
    (name -> (array, raw GGML type name or None for the array's own dtype))."""

    kv: dict[str, tuple[object, str]]
    tensors: dict[str, tuple[np.ndarray, str | None]]


def clean_parts(cfg: TinyConfig | None = None) -> Parts:
    cfg = TinyConfig() if cfg is None else cfg
    tokens, scores, types = vocabulary(cfg)
    kv = {
        "general.architecture": (ARCH, "STRING"),
        "general.name": ("tiny-llama-corpus", "STRING"),
        f"{ARCH}.context_length": (cfg.n_ctx_train, "UINT32"),
        f"{ARCH}.embedding_length": (cfg.n_embd, "UINT32"),
        f"{ARCH}.block_count": (cfg.n_layer, "UINT32"),
        f"{ARCH}.feed_forward_length": (cfg.n_ff, "UINT32"),
        f"{ARCH}.attention.head_count": (cfg.n_head, "UINT32"),
        f"{ARCH}.attention.head_count_kv": (cfg.n_head_kv, "UINT32"),
        f"{ARCH}.attention.layer_norm_rms_epsilon": (cfg.rms_eps, "FLOAT32"),
        f"{ARCH}.rope.freq_base": (cfg.rope_base, "FLOAT32"),
        f"{ARCH}.rope.dimension_count": (cfg.head_dim, "UINT32"),
        "tokenizer.ggml.model": ("llama", "STRING"),
        "tokenizer.ggml.tokens": (tokens, "ARRAY:STRING"),
        "tokenizer.ggml.scores": (scores, "ARRAY:FLOAT32"),
        "tokenizer.ggml.token_type": (types, "ARRAY:INT32"),
        "tokenizer.ggml.bos_token_id": (1, "UINT32"),
        "tokenizer.ggml.eos_token_id": (2, "UINT32"),
        "tokenizer.ggml.unknown_token_id": (0, "UINT32"),
        "tokenizer.ggml.add_bos_token": (True, "BOOL"),
    }
    return Parts(kv, {name: (array, None) for name, array in weights(cfg).items()})


def write_parts(path: Path, parts: Parts) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), ARCH)
    writer.kv_data[0].clear()  # every key comes from parts, the architecture included
    for key, (value, vtype) in parts.kv.items():
        if vtype.startswith("ARRAY:"):
            writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType[vtype.split(":")[1]])
        else:
            writer.add_key_value(key, value, gguf.GGUFValueType[vtype])
    for name, (array, raw) in parts.tensors.items():
        if raw is None:
            writer.add_tensor(name, array)
        else:
            qtype = gguf.GGMLQuantizationType[raw]
            data = gguf.quants.quantize(array, qtype)
            writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ---- mutations of the parts: name -> function(Parts) -> None ---------------------------------------


def _set(key: str, value, vtype: str) -> Callable[[Parts], None]:
    def mutate(p: Parts) -> None:
        p.kv[key] = (value, vtype)

    return mutate


def _drop(key: str) -> Callable[[Parts], None]:
    def mutate(p: Parts) -> None:
        p.kv.pop(key)

    return mutate


def _retype(tensor: str, raw: str) -> Callable[[Parts], None]:
    def mutate(p: Parts) -> None:
        p.tensors[tensor] = (p.tensors[tensor][0], raw)

    return mutate


def _reshape(tensor: str, shape: tuple[int, ...]) -> Callable[[Parts], None]:
    def mutate(p: Parts) -> None:
        array = p.tensors[tensor][0]
        p.tensors[tensor] = (np.resize(array, shape).astype(array.dtype), None)

    return mutate


def _drop_tensor(tensor: str) -> Callable[[Parts], None]:
    def mutate(p: Parts) -> None:
        del p.tensors[tensor]

    return mutate


def _tokens(edit: Callable[[list], list], key: str = "tokenizer.ggml.tokens") -> Callable[[Parts], None]:
    def mutate(p: Parts) -> None:
        value, vtype = p.kv[key]
        p.kv[key] = (edit(list(value)), vtype)

    return mutate


def _duplicate_token(tokens: list) -> list:
    tokens[300] = tokens[301]
    return tokens


H = f"{ARCH}."
PART_MUTATIONS: dict[str, Callable[[Parts], None]] = {
    "block_count_0": _set(H + "block_count", 0, "UINT32"),
    "block_count_1000": _set(H + "block_count", 1000, "UINT32"),
    "block_count_3_missing_tensors": _set(H + "block_count", 3, "UINT32"),
    "block_count_as_string": _set(H + "block_count", "2", "STRING"),
    "block_count_missing": _drop(H + "block_count"),
    "head_count_0": _set(H + "attention.head_count", 0, "UINT32"),
    "head_count_3": _set(H + "attention.head_count", 3, "UINT32"),
    "head_count_1000": _set(H + "attention.head_count", 1000, "UINT32"),
    "head_count_kv_0": _set(H + "attention.head_count_kv", 0, "UINT32"),
    "head_count_kv_3": _set(H + "attention.head_count_kv", 3, "UINT32"),
    "head_count_kv_8": _set(H + "attention.head_count_kv", 8, "UINT32"),
    "embedding_length_0": _set(H + "embedding_length", 0, "UINT32"),
    "embedding_length_63": _set(H + "embedding_length", 63, "UINT32"),
    "feed_forward_length_0": _set(H + "feed_forward_length", 0, "UINT32"),
    "context_length_0": _set(H + "context_length", 0, "UINT32"),
    "context_length_huge": _set(H + "context_length", 2**31, "UINT32"),
    "rope_dimension_0": _set(H + "rope.dimension_count", 0, "UINT32"),
    "rope_dimension_1000": _set(H + "rope.dimension_count", 1000, "UINT32"),
    "rms_eps_0": _set(H + "attention.layer_norm_rms_epsilon", 0.0, "FLOAT32"),
    "rms_eps_nan": _set(H + "attention.layer_norm_rms_epsilon", float("nan"), "FLOAT32"),
    "rms_eps_missing": _drop(H + "attention.layer_norm_rms_epsilon"),
    "architecture_unknown": _set("general.architecture", "no-such-arch", "STRING"),
    "architecture_missing": _drop("general.architecture"),
    "architecture_as_int": _set("general.architecture", 7, "UINT32"),
    "attn_norm_q8_0": _retype("blk.0.attn_norm.weight", "Q8_0"),
    "ffn_norm_f16": _retype("blk.1.ffn_norm.weight", "F16"),
    "output_norm_q8_0": _retype("output_norm.weight", "Q8_0"),
    "output_norm_f16": _retype("output_norm.weight", "F16"),
    "attn_q_q8_0": _retype("blk.0.attn_q.weight", "Q8_0"),
    "attn_q_transposed_shape": _reshape("blk.0.attn_q.weight", (64, 32)),
    "token_embd_short": _reshape("token_embd.weight", (100, 64)),
    "output_norm_2d": _reshape("output_norm.weight", (2, 64)),
    "missing_attn_k": _drop_tensor("blk.1.attn_k.weight"),
    "missing_output_norm": _drop_tensor("output_norm.weight"),
    "vocab_duplicate_token": _tokens(_duplicate_token),
    "vocab_one_token": _tokens(lambda t: t[:1]),
    "vocab_tokens_missing": _drop("tokenizer.ggml.tokens"),
    "vocab_tokens_as_ints": _set("tokenizer.ggml.tokens", list(range(320)), "ARRAY:INT32"),
    "vocab_scores_short": _tokens(lambda s: s[:10], "tokenizer.ggml.scores"),
    "vocab_types_short": _tokens(lambda s: s[:10], "tokenizer.ggml.token_type"),
    "vocab_types_invalid": _tokens(lambda s: [99] * len(s), "tokenizer.ggml.token_type"),
    "vocab_scores_as_strings": _set("tokenizer.ggml.scores", ["x"] * 320, "ARRAY:STRING"),
    "vocab_bigger_than_embd": _tokens(lambda t: t + [f"▁extra{i}" for i in range(50)]),
    "vocab_smaller_than_embd": _tokens(lambda t: t[:300]),
    "tokenizer_model_unknown": _set("tokenizer.ggml.model", "no-such-tokenizer", "STRING"),
    "bos_out_of_range": _set("tokenizer.ggml.bos_token_id", 10**6, "UINT32"),
    "eos_out_of_range": _set("tokenizer.ggml.eos_token_id", 4_000_000_000, "UINT32"),
    "unk_out_of_range": _set("tokenizer.ggml.unknown_token_id", 320, "UINT32"),
    "bos_as_string": _set("tokenizer.ggml.bos_token_id", "1", "STRING"),
    "empty_token_text": _tokens(lambda t: t[:5] + [""] + t[6:]),
}


# ---- mutations of the bytes: name -> function(bytes, reader of them) -> bytes ---------------------

GGUF_HEADER = struct.Struct("<4sIQQ")  # magic, version, n_tensors, n_kv


def _patch_header(field: int, value: int) -> Callable[[bytes], bytes]:
    def mutate(data: bytes, reader) -> bytes:
        header = list(GGUF_HEADER.unpack_from(data))
        header[field] = value
        return GGUF_HEADER.pack(*header) + data[GGUF_HEADER.size :]

    return mutate


def _first_key_length(value: int) -> Callable[[bytes], bytes]:
    def mutate(data: bytes, reader) -> bytes:
        at = GGUF_HEADER.size
        return data[:at] + struct.pack("<Q", value) + data[at + 8 :]

    return mutate


def _reader_patch(edit: Callable[[object, bytearray], None]) -> Callable[[bytes], bytes]:
    """A byte edit located with gguf-py's reader (field and tensor-info offsets)."""

    def mutate(data: bytes, reader) -> bytes:
        out = bytearray(data)
        edit(reader, out)
        return bytes(out)

    return mutate


def _tensor_info(name: str, field: str, value: int) -> Callable[[bytes], bytes]:
    """Overwrite a tensor-info field: "offset", "type", "n_dims" or "dim0"."""

    def edit(reader, out: bytearray) -> None:
        t = next(t for t in reader.tensors if t.name == name)
        info = t.field
        part = {"offset": info.parts[-1], "type": info.parts[-2], "n_dims": info.parts[2], "dim0": info.parts[3]}[field]
        at = part.ctypes.data - reader.data.ctypes.data
        out[at : at + part.nbytes] = np.asarray([value], dtype=part.dtype).tobytes()

    return _reader_patch(edit)


def _string_length(key: str, value: int) -> Callable[[bytes], bytes]:
    def edit(reader, out: bytearray) -> None:
        field = reader.fields[key]
        part = field.parts[3]  # key length, key, type, value length, value
        at = part.ctypes.data - reader.data.ctypes.data
        out[at : at + 8] = struct.pack("<Q", value)

    return _reader_patch(edit)


def _array_length(key: str, value: int) -> Callable[[bytes], bytes]:
    def edit(reader, out: bytearray) -> None:
        field = reader.fields[key]
        part = field.parts[4]  # key length, key, type, item type, count, ...
        at = part.ctypes.data - reader.data.ctypes.data
        out[at : at + 8] = struct.pack("<Q", value)

    return _reader_patch(edit)


def _truncate(fraction: float) -> Callable[[bytes], bytes]:
    return lambda data, reader: data[: int(len(data) * fraction)]


def _flips(seed: int, count: int, region: str) -> Callable[[bytes], bytes]:
    def mutate(data: bytes, reader) -> bytes:
        rng = np.random.default_rng(seed)
        start = int(reader.data_offset)
        lo, hi = (GGUF_HEADER.size, start) if region == "header" else (start, len(data))
        out = bytearray(data)
        for at in rng.integers(lo, hi, count):
            out[at] ^= 1 << int(rng.integers(0, 8))
        return bytes(out)

    return mutate


BYTE_MUTATIONS: dict[str, Callable[[bytes], bytes]] = {
    "version_0": _patch_header(1, 0),
    "version_99": _patch_header(1, 99),
    "n_tensors_huge": _patch_header(2, 2**62),
    "n_tensors_plus_one": _patch_header(2, 21),
    "n_kv_huge": _patch_header(3, 2**62),
    "n_kv_plus_one": _patch_header(3, 20),
    "first_key_length_huge": _first_key_length(2**60),
    "first_key_length_zero": _first_key_length(0),
    "name_length_huge": _string_length("general.name", 2**40),
    "tokens_count_huge": _array_length("tokenizer.ggml.tokens", 2**40),
    "scores_count_huge": _array_length("tokenizer.ggml.scores", 2**33),
    "tensor_offset_past_end": _tensor_info("output.weight", "offset", 2**40),
    "tensor_offset_misaligned": _tensor_info("blk.0.attn_q.weight", "offset", 3),
    "tensor_type_invalid": _tensor_info("blk.0.attn_q.weight", "type", 250),
    "tensor_n_dims_9": _tensor_info("blk.0.ffn_up.weight", "n_dims", 9),
    "tensor_dim_huge": _tensor_info("blk.0.ffn_up.weight", "dim0", 2**40),
    "tensor_dim_zero": _tensor_info("blk.0.ffn_up.weight", "dim0", 0),
    **{f"truncated_{int(f * 1000)}permille": _truncate(f) for f in (0.0005, 0.002, 0.01, 0.05, 0.2, 0.5, 0.9, 0.999)},
    **{f"header_flips_seed{s}": _flips(s, 1 + s % 4, "header") for s in range(24)},
    **{f"data_flips_seed{s}": _flips(100 + s, 64, "data") for s in range(4)},
}


def write_corpus(folder: Path) -> dict[str, Path]:
    """The clean file ("clean") and one file per mutation."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"clean": write_parts(folder / "clean.gguf", clean_parts())}
    for name, mutate in PART_MUTATIONS.items():
        parts = clean_parts()
        mutate(parts)
        files[name] = write_parts(folder / f"{name}.gguf", parts)
    import gguf

    clean = files["clean"].read_bytes()
    reader = gguf.GGUFReader(files["clean"])
    for name, mutate in BYTE_MUTATIONS.items():
        path = folder / f"{name}.gguf"
        path.write_bytes(mutate(clean, reader))
        files[name] = path
    return files


# ---- loading in a worker ---------------------------------------------------------------------------

WORKER = r"""
import sys
from llama_ffi.high import Llama
print("@@ ready", flush=True)
for line in sys.stdin:
    path = line.rstrip("\n")
    try:
        with Llama(path, n_ctx=64, progress=False) as llm:
            llm("hello", max_tokens=2, temperature=0.0)
        print("@@ loaded", flush=True)
    except Exception as e:
        print("@@ error", type(e).__name__, str(e).replace("\n", " ")[:500], flush=True)
"""


@dataclasses.dataclass
class Outcome:
    kind: str  # loaded, error, crash, hang
    detail: str = ""


class _Worker:
    def __init__(self, repo_root: Path) -> None:
        # ggml's abort prints a gdb backtrace on stdout unless told not to.
        env = dict(os.environ, PYTHONPATH=str(repo_root), GGML_NO_BACKTRACE="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            bufsize=1,
        )
        self.readline(120)

    def readline(self, timeout: float) -> str | None:
        """The worker's next answer line ("" when it died, None when it took too long)."""
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                return None
            line = self.proc.stdout.readline()
            if not line or line.startswith("@@ "):
                return line[3:]

    def kill(self) -> int:
        self.proc.kill()
        return self.proc.wait()


def load_all(files: dict[str, Path], repo_root: Path, timeout: float = 60.0) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    worker = _Worker(repo_root)
    try:
        for name, path in files.items():
            worker.proc.stdin.write(f"{path}\n")
            worker.proc.stdin.flush()
            started = time.monotonic()
            line = worker.readline(timeout)
            if line:
                kind, _, detail = line.rstrip("\n").partition(" ")
                outcomes[name] = Outcome(kind, detail)
                continue
            if line is None:
                outcomes[name] = Outcome("hang", f"no answer in {time.monotonic() - started:.0f} s")
                worker.kill()
            else:
                outcomes[name] = Outcome("crash", f"worker exited with {worker.proc.wait()}")
            worker = _Worker(repo_root)
    finally:
        worker.kill()
    return outcomes
