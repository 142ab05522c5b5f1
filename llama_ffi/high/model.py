"""The owner of one ``llama_model``: load (validated, with llama.cpp's reason on failure), free."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from llama_ffi import ffi, lib, rpc
from llama_ffi._logging import capture_errors, reason
from llama_ffi.devices import device_by_name
from llama_ffi.high._checks import flag, integer, number
from llama_ffi.high.constraints import tokenizer as constraint_tokenizers
from llama_ffi.high.errors import RequestTypeError, RequestValueError
from llama_ffi.high.validate import check_model_file

GGUF_MAGIC = b"GGUF"


@dataclasses.dataclass(frozen=True)
class ModelParams:
    """Model loading parameters; ``None`` keeps llama.cpp's default."""

    n_gpu_layers: int | None = None
    split_mode: int | None = None
    main_gpu: int | None = None
    tensor_split: Sequence[float] | None = None  # a weight per device
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    vocab_only: bool = False
    kv_overrides: Mapping[str, bool | int | float | str] | None = None
    progress: bool | None = None  # None: a bar when stderr is a terminal
    load_mtp: bool = False  # also load the NextN/MTP blocks (speculative DRAFT_MTP)
    rpc_servers: str | Sequence[str] | None = None  # workers' "host:port" (llama_ffi.rpc)
    device: str | None = None  # one ggml device by name ("CPU": no offload), as llama.cpp's --device

    def validate(self) -> None:
        if self.n_gpu_layers is not None:
            integer("n_gpu_layers", self.n_gpu_layers, minimum=-1)
        if self.split_mode is not None:
            integer("split_mode", self.split_mode, lib.LLAMA_SPLIT_MODE_NONE, lib.LLAMA_SPLIT_MODE_TENSOR)
        if self.main_gpu is not None:
            integer("main_gpu", self.main_gpu, 0)
        if self.device is not None:
            if not isinstance(self.device, str):
                raise RequestTypeError(
                    f"device must be a ggml device name (a str) or None, got {type(self.device).__name__}"
                )
            if self.rpc_servers is not None:
                raise RequestValueError(
                    "pass either device or rpc_servers: the workers' devices are the model's devices"
                )
        if self.tensor_split is not None:
            if len(self.tensor_split) > lib.llama_max_devices():
                raise RequestValueError(
                    f"tensor_split has {len(self.tensor_split)} weights; llama.cpp takes at most "
                    f"{lib.llama_max_devices()} (llama_max_devices)"
                )
            for i, w in enumerate(self.tensor_split):
                number(f"tensor_split[{i}]", w, 0.0)
        for name in ("use_mmap", "use_mlock", "vocab_only"):
            if getattr(self, name) is not None:
                flag(name, getattr(self, name))
        for key, value in (self.kv_overrides or {}).items():
            if not isinstance(key, str) or not key or len(key.encode()) >= 128:
                raise RequestValueError(f"kv_overrides key must be a non-empty str under 128 bytes: {key!r}")
            if not isinstance(value, (bool, int, float, str)):
                raise RequestTypeError(f"kv_overrides[{key!r}] must be bool, int, float or str")
            if isinstance(value, str) and len(value.encode()) >= 128:
                raise RequestValueError(f"kv_overrides[{key!r}]: string values must be under 128 bytes")


class _Progress:
    """Draws llama.cpp's load progress on stderr."""

    def __init__(self) -> None:
        self.last = -1

    def update(self, fraction: float) -> None:
        filled = int(fraction * 30)
        if filled != self.last:
            self.last = filled
            sys.stderr.write(f"\rloading model [{'#' * filled}{'.' * (30 - filled)}] {fraction * 100:5.1f}%")
            if fraction >= 1.0:
                sys.stderr.write("\n")
            sys.stderr.flush()


@ffi.def_extern()
def llama_ffi_on_progress(fraction, user_data):
    ffi.from_handle(user_data).update(fraction)
    return True


def check_gguf_file(path: Path) -> None:
    """Fail early, in Python, for what llama.cpp would only log."""
    if not path.exists():
        raise FileNotFoundError(f"model file not found: {path}")
    if not path.is_file():
        raise RequestValueError(f"model path is not a file: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise RequestValueError(f"{path} is not a GGUF file (starts with {magic!r}, expected {GGUF_MAGIC!r})")


FINGERPRINT_SPAN = 1 << 20


def file_fingerprint(path: Path) -> str:
    """A model file's identity for saved states: its size and the hash of its first and last MiB
    (the GGUF header and metadata, the first and last tensors' bytes). Two files that differ only
    inside the middle tensors collide; that costs 2 MiB of reading instead of the whole file."""
    digest = hashlib.sha256()
    size = path.stat().st_size
    digest.update(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(FINGERPRINT_SPAN))
        f.seek(max(size - FINGERPRINT_SPAN, 0))
        digest.update(f.read(FINGERPRINT_SPAN))
    return digest.hexdigest()[:32]


def load_mode(use_mmap: bool | None, use_mlock: bool | None) -> int:
    """llama-cpp-python's use_mmap / use_mlock as this pin's ``llama_load_mode`` (the two flags
    became one enum; an unset flag keeps its llama-cpp-python default: mmap on, mlock off)."""
    mmap = True if use_mmap is None else use_mmap
    mlock = False if use_mlock is None else use_mlock
    return {
        (True, False): lib.LLAMA_LOAD_MODE_MMAP,
        (False, False): lib.LLAMA_LOAD_MODE_NONE,
        (True, True): lib.LLAMA_LOAD_MODE_MMAP_MLOCK,
        (False, True): lib.LLAMA_LOAD_MODE_MLOCK,
    }[(mmap, mlock)]


def _apply_overrides(mp, overrides: Mapping[str, bool | int | float | str], keep: list) -> None:
    arr = ffi.new("struct llama_model_kv_override[]", len(overrides) + 1)  # zeroed: terminator
    for i, (key, value) in enumerate(overrides.items()):
        item = arr[i]
        item.key = key.encode()
        if isinstance(value, bool):
            item.tag, item.val_bool = lib.LLAMA_KV_OVERRIDE_TYPE_BOOL, value
        elif isinstance(value, int):
            item.tag, item.val_i64 = lib.LLAMA_KV_OVERRIDE_TYPE_INT, value
        elif isinstance(value, float):
            item.tag, item.val_f64 = lib.LLAMA_KV_OVERRIDE_TYPE_FLOAT, value
        else:
            item.tag, item.val_str = lib.LLAMA_KV_OVERRIDE_TYPE_STR, value.encode()
    mp.kv_overrides = arr
    keep.append(arr)


def _device_list(name: str | None):
    """``llama_model_params.devices`` for one device named as ggml names it: NULL-terminated; the CPU
    is implicit in llama.cpp, so "CPU" is the empty list (nothing offloaded)."""
    if name is None:
        return None
    dev = device_by_name(name)
    if lib.ggml_backend_dev_type(dev) == lib.GGML_BACKEND_DEVICE_TYPE_CPU:
        return ffi.new("ggml_backend_dev_t[]", [ffi.NULL])
    return ffi.new("ggml_backend_dev_t[]", [dev, ffi.NULL])


class Model:
    """One loaded GGUF model. Freed by ``close()``, a ``with`` block, or garbage collection."""

    def __init__(self, path: str | os.PathLike, params: ModelParams = ModelParams()) -> None:
        self._ptr = ffi.NULL
        self.remote: rpc.RpcDevices | None = None
        self.path = Path(path)
        params.validate()
        check_gguf_file(self.path)
        check_model_file(self.path)
        if params.rpc_servers is not None:
            self.remote = rpc.RpcDevices(params.rpc_servers)
        try:
            self._load(params)
        except BaseException:
            self._close_remote()
            raise

    def _load(self, params: ModelParams) -> None:
        mp = lib.llama_model_default_params()
        if params.n_gpu_layers is not None:
            mp.n_gpu_layers = params.n_gpu_layers
        if params.split_mode is not None:
            mp.split_mode = params.split_mode
        if params.main_gpu is not None:
            mp.main_gpu = params.main_gpu
        keep: list = []
        devices = self.remote.array if self.remote is not None else _device_list(params.device)
        if devices is not None:
            mp.devices = devices
            keep.append(devices)
        if params.tensor_split is not None:
            split = ffi.new("float[]", max(lib.llama_max_devices(), 1))
            split[0 : len(params.tensor_split)] = list(params.tensor_split)
            mp.tensor_split = split
            keep.append(split)
        if params.use_mmap is not None or params.use_mlock is not None:
            mp.load_mode = load_mode(params.use_mmap, params.use_mlock)
        mp.vocab_only = params.vocab_only
        mp.load_mtp = flag("load_mtp", params.load_mtp)
        if params.kv_overrides:
            _apply_overrides(mp, params.kv_overrides, keep)
        show = sys.stderr.isatty() if params.progress is None else params.progress
        if show:
            handle = ffi.new_handle(_Progress())
            keep.append(handle)
            mp.progress_callback = lib.llama_ffi_on_progress
            mp.progress_callback_user_data = handle
        with capture_errors() as errors:
            ptr = lib.llama_model_load_from_file(os.fsencode(self.path), mp)
        if self.remote is not None:
            if ptr != ffi.NULL:
                try:
                    self.remote.check()
                except rpc.RpcWorkerLost:
                    lib.llama_model_free(ptr)
                    raise
            else:
                self.remote.check()
        if ptr == ffi.NULL:
            raise RequestValueError(
                f"llama.cpp could not load {self.path}: {reason(errors, 'unknown error (see the llama_ffi logger)')}"
            )
        self._ptr = ptr
        self.vocab = lib.llama_model_get_vocab(ptr)
        self.params, self._keep = mp, keep  # the struct points into what keep holds

    @property
    def ptr(self):
        if self._ptr == ffi.NULL:
            raise RuntimeError("this model has been closed")
        return self._ptr

    @property
    def closed(self) -> bool:
        return self._ptr == ffi.NULL

    def close(self) -> None:
        ptr, self._ptr = self._ptr, ffi.NULL
        if ptr != ffi.NULL:
            constraint_tokenizers.forget(lib.llama_model_get_vocab(ptr))  # its address may be reused
            lib.llama_model_free(ptr)
        self._close_remote()

    def _close_remote(self) -> None:
        remote, self.remote = self.remote, None
        if remote is not None:
            remote.close()  # after the free: the model's buffers talk to the workers until then

    def check_remote(self) -> None:
        """Raise :class:`llama_ffi.rpc.RpcWorkerLost` when a worker of this model has gone away."""
        if self.remote is not None:
            self.remote.check()

    def __del__(self) -> None:
        if getattr(self, "_ptr", ffi.NULL) != ffi.NULL or getattr(self, "remote", None) is not None:
            self.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- facts about the model ----------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return lib.llama_vocab_n_tokens(self.vocab_ptr)

    @property
    def vocab_ptr(self):
        self.ptr  # noqa: B018 - raises after close
        return self.vocab

    @property
    def n_ctx_train(self) -> int:
        return lib.llama_model_n_ctx_train(self.ptr)

    @property
    def n_embd(self) -> int:
        return lib.llama_model_n_embd(self.ptr)

    @property
    def n_layer(self) -> int:
        return lib.llama_model_n_layer(self.ptr)

    @functools.cached_property
    def fingerprint(self) -> str:
        """The loaded file's identity (``file_fingerprint``), read once."""
        return file_fingerprint(self.path)

    @property
    def memory_is_recurrent(self) -> bool:
        """Recurrent or hybrid memory: a cache that cannot be cut at a position."""
        return bool(lib.llama_model_is_recurrent(self.ptr) or lib.llama_model_is_hybrid(self.ptr))

    @property
    def generates_text(self) -> bool:
        """False for an encoder whose attention is not causal (BERT and its kin): it embeds, it has
        no next-token logits to sample from."""
        buf = ffi.new("char[]", 16)
        arch = self.metadata_value("general.architecture")
        n = lib.llama_model_meta_val_str(self.ptr, f"{arch}.attention.causal".encode(), buf, 16)
        return n < 0 or ffi.string(buf) != b"false"

    def metadata_value(self, key: str) -> str | None:
        """One metadata value as text (None when the file has no ``key``)."""
        n = lib.llama_model_meta_val_str(self.ptr, key.encode(), ffi.NULL, 0)
        if n < 0:
            return None
        buf = ffi.new("char[]", n + 1)
        lib.llama_model_meta_val_str(self.ptr, key.encode(), buf, n + 1)
        return ffi.string(buf).decode("utf-8", "replace")

    @property
    def n_swa(self) -> int:
        """The sliding attention window (0: none)."""
        return lib.llama_model_n_swa(self.ptr)

    def metadata(self) -> dict[str, str]:
        out = {}
        buf_size = 4096
        buf = ffi.new("char[]", buf_size)
        for i in range(lib.llama_model_meta_count(self.ptr)):
            n = lib.llama_model_meta_key_by_index(self.ptr, i, buf, buf_size)
            if n < 0:
                continue
            key = ffi.string(buf).decode("utf-8", "replace")
            n = lib.llama_model_meta_val_str_by_index(self.ptr, i, buf, buf_size)
            if n >= buf_size:  # long values (chat templates): ask again with room for them
                big = ffi.new("char[]", n + 1)
                lib.llama_model_meta_val_str_by_index(self.ptr, i, big, n + 1)
                out[key] = ffi.string(big).decode("utf-8", "replace")
            elif n >= 0:
                out[key] = ffi.string(buf).decode("utf-8", "replace")
        return out
