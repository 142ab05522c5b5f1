"""Adapters per request: a registry of loaded LoRA adapters, control vectors (llama.cpp's buffer
layout, from data or from control-vector GGUF files), and the selection a request runs under.

A selection has a key; the KV cache was computed under exactly one key, so a request under
another key evaluates its prompt afresh (prefix reuse is keyed on the adapter set).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import math
import os
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from llama_ffi import ffi, lib
from llama_ffi._logging import capture_errors, reason
from llama_ffi.high.errors import RequestTypeError, RequestValueError
from llama_ffi.high.model import Model, check_gguf_file

ADAPTER_TYPE_KEY = "adapter.type"
LORA_ALPHA_KEY = "adapter.lora.alpha"
DIRECTION_PREFIX = "direction."  # control vector tensors: direction.<layer>, layer >= 1


class LoraAdapter:
    """One loaded ``llama_adapter_lora``. llama.cpp frees what is left of a model's adapters with
    the model, so this owner frees only while its model is open."""

    def __init__(self, model: Model, name: str, path: str | os.PathLike) -> None:
        self._ptr = ffi.NULL
        self.model, self.name, self.path = model, name, Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"LoRA adapter file not found: {self.path}")
        check_gguf_file(self.path)
        kind = _adapter_type(self.path)
        if kind != "lora":
            raise RequestValueError(
                f"{self.path} is not a LoRA adapter ({ADAPTER_TYPE_KEY} is {kind!r}, expected 'lora')"
            )
        with capture_errors() as errors:
            ptr = lib.llama_adapter_lora_init(model.ptr, os.fsencode(self.path))
        if ptr == ffi.NULL:
            raise RequestValueError(
                f"llama.cpp could not load the LoRA adapter {self.path} for this model: "
                f"{reason(errors, 'unknown error (see the llama_ffi logger)')}"
            )
        self._ptr = ptr
        self.metadata = _adapter_metadata(ptr)

    @property
    def ptr(self):
        if self._ptr == ffi.NULL:
            raise RuntimeError(f"the LoRA adapter {self.name!r} has been unloaded")
        return self._ptr

    @property
    def alpha(self) -> float | None:
        value = self.metadata.get(LORA_ALPHA_KEY)
        return float(value) if value is not None else None

    def close(self) -> None:
        ptr, self._ptr = self._ptr, ffi.NULL
        if ptr != ffi.NULL and not self.model.closed:
            lib.llama_adapter_lora_free(ptr)


def _adapter_metadata(ptr) -> dict[str, str]:
    out, buf = {}, ffi.new("char[]", 1024)
    for i in range(lib.llama_adapter_meta_count(ptr)):
        if lib.llama_adapter_meta_key_by_index(ptr, i, buf, len(buf)) < 0:
            continue
        key = ffi.string(buf).decode("utf-8", "replace")
        if lib.llama_adapter_meta_val_str_by_index(ptr, i, buf, len(buf)) >= 0:
            out[key] = ffi.string(buf).decode("utf-8", "replace")
    return out


@contextlib.contextmanager
def _open_gguf(path: Path, what: str, tensors=None):
    """A gguf_context (with tensor data into ``*tensors`` when given); ValueError when unreadable."""
    params = ffi.new(
        "struct gguf_init_params *", {"no_alloc": tensors is None, "ctx": ffi.NULL if tensors is None else tensors}
    )
    with capture_errors() as errors:
        ctx = lib.gguf_init_from_file(os.fsencode(path), params[0])
    if ctx == ffi.NULL:
        raise RequestValueError(f"{path} is not a readable {what}: {reason(errors, 'damaged file')}")
    try:
        yield ctx
    finally:
        lib.gguf_free(ctx)
        if tensors is not None and tensors[0] != ffi.NULL:
            lib.ggml_free(tensors[0])


def _adapter_type(path: Path) -> str | None:
    """A GGUF's ``adapter.type``; ValueError when unreadable. (f32 adapters were once refused after a
    crash seen on another machine; neither b11434 nor b11549 crashes with them here.)"""
    with _open_gguf(path, "GGUF file") as ctx:
        i = lib.gguf_find_key(ctx, ADAPTER_TYPE_KEY.encode())
        if i >= 0 and lib.gguf_get_kv_type(ctx, i) == lib.GGUF_TYPE_STRING:
            return ffi.string(lib.gguf_get_val_str(ctx, i)).decode("utf-8", "replace")
        return None


# ---- control vectors ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class ControlVector:
    """llama.cpp's control vector buffer: one row of n_embd floats per layer from layer 1 (row
    i is layer i + 1), applied to layers ``layer_start..layer_end`` (both inclusive)."""

    data: np.ndarray
    n_embd: int
    layer_start: int
    layer_end: int

    @property
    def key(self) -> tuple:
        digest = hashlib.sha1(self.data.tobytes()).hexdigest()
        return (digest, self.n_embd, self.layer_start, self.layer_end)


def read_control_vector_file(path: str | os.PathLike, scale: float = 1.0) -> tuple[int, np.ndarray]:
    """(n_embd, rows) of one control-vector GGUF: its ``direction.N`` tensors (f32, 1-D, N >= 1)
    scaled and placed at row N - 1; several tensors for one layer add up (llama.cpp's rules)."""
    path = Path(path)
    check_gguf_file(path)
    holder = ffi.new("struct ggml_context **")
    with _open_gguf(path, "control vector GGUF", holder) as gctx:
        rows: dict[int, np.ndarray] = {}
        n_embd = -1
        for i in range(lib.gguf_get_n_tensors(gctx)):
            name = ffi.string(lib.gguf_get_tensor_name(gctx, i)).decode("utf-8", "replace")
            layer = name[len(DIRECTION_PREFIX) :] if name.startswith(DIRECTION_PREFIX) else ""
            if not layer.isdigit() or int(layer) == 0:
                raise RequestValueError(f"{path}: tensor {name!r} is not direction.<layer> with a layer >= 1")
            tensor = lib.ggml_get_tensor(holder[0], name.encode())
            if tensor.type != lib.GGML_TYPE_F32 or lib.ggml_n_dims(tensor) != 1:
                raise RequestValueError(f"{path}: tensor {name!r} must be a 1-D f32 tensor")
            n = lib.ggml_nelements(tensor)
            if n_embd not in (-1, n):
                raise RequestValueError(f"{path}: tensor {name!r} has {n} values, the others {n_embd}")
            n_embd = n
            values = np.frombuffer(ffi.buffer(tensor.data, 4 * n), dtype=np.float32) * np.float32(scale)
            rows[int(layer)] = rows.get(int(layer), np.zeros(n, np.float32)) + values
        if not rows:
            raise RequestValueError(f"{path} holds no direction tensors")
    data = np.zeros((max(rows), n_embd), np.float32)
    for layer, values in rows.items():
        data[layer - 1] = values
    return n_embd, data.reshape(-1)


def control_vector(spec, n_embd: int, n_layer: int) -> ControlVector | None:
    """A request's ``control_vector``: a ControlVector, or a dict with ``data`` (floats, llama.cpp's
    layout) or ``files`` (paths, or (path, scale) pairs, summed), and optional ``layer_start`` /
    ``layer_end`` (default: 1 and the model's layer count, as llama.cpp's)."""
    if spec is None or isinstance(spec, ControlVector):
        return spec
    if not isinstance(spec, Mapping):
        raise RequestTypeError("control_vector must be a dict with 'data' or 'files' (or a ControlVector)")
    unknown = set(spec) - {"data", "files", "layer_start", "layer_end"}
    if unknown or ("data" in spec) == ("files" in spec):
        raise RequestValueError(
            "control_vector takes exactly one of 'data' or 'files', plus optional "
            f"'layer_start' / 'layer_end'; got keys {sorted(spec)}"
        )
    start, end = spec.get("layer_start", 1), spec.get("layer_end", n_layer)
    for name, value in (("layer_start", start), ("layer_end", end)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= n_layer:
            raise RequestValueError(
                f"control_vector {name} must be an int in 1..{n_layer} (the model's layers), got {value!r}"
            )
    if start > end:
        raise RequestValueError(f"control_vector layer_start ({start}) is after layer_end ({end})")
    if "data" in spec:
        data = np.ascontiguousarray(np.asarray(spec["data"], dtype=np.float32).reshape(-1))
        if data.size == 0 or data.size % n_embd or data.size // n_embd > n_layer:
            raise RequestValueError(
                f"control_vector data has {data.size} floats; expected n_embd ({n_embd}) x the "
                f"number of layers it covers from layer 1, e.g. {n_embd} x {end} = {n_embd * end}"
            )
    else:
        data = _sum_files(spec["files"], n_embd)
    if not np.all(np.isfinite(data)):
        raise RequestValueError("control_vector data must be finite")
    return ControlVector(data, n_embd, start, end)


def _sum_files(files, n_embd: int) -> np.ndarray:
    items = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    if not items:
        raise RequestValueError("control_vector files is empty")
    total = np.zeros(0, np.float32)
    for item in items:
        path, scale = (item, 1.0) if isinstance(item, (str, os.PathLike)) else item
        _finite_scale(f"control vector {path}", scale)
        width, data = read_control_vector_file(path, scale)
        if width != n_embd:
            raise RequestValueError(f"control vector {path} has n_embd {width}; the model has {n_embd}")
        if data.size > total.size:
            total = np.concatenate([total, np.zeros(data.size - total.size, np.float32)])
        total[: data.size] += data
    return total


def _finite_scale(what: str, scale) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise RequestValueError(f"{what}: scale must be a finite number, got {scale!r}")
    return float(scale)


# ---- selection ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class Selection:
    """What a request runs under: LoRA adapters with their scales, and a control vector."""

    loras: tuple[tuple[LoraAdapter, float], ...] = ()
    cvec: ControlVector | None = None

    @functools.cached_property  # compared at every step of the engine
    def key(self) -> tuple:
        return (tuple((id(a), s) for a, s in self.loras), self.cvec.key if self.cvec is not None else None)

    @property
    def stable_key(self) -> str:
        """The selection by adapter names, files and scales: the same in another process."""
        return repr(
            (tuple((a.name, str(a.path), s) for a, s in self.loras), self.cvec.key if self.cvec is not None else None)
        )


BASE = Selection()


class Adapters:
    """The LoRA adapters loaded on one model, by name, and what the context has applied."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.by_name: dict[str, LoraAdapter] = {}
        self.default = BASE  # Llama(lora_path=...): the set for requests that name none
        self.applied = BASE  # what the context computes with now
        self._live: weakref.WeakSet = weakref.WeakSet()  # selections of unfinished requests

    def load(self, name: str, path: str | os.PathLike) -> LoraAdapter:
        if not isinstance(name, str) or not name:
            raise RequestValueError(f"a LoRA adapter name must be a non-empty str, got {name!r}")
        if name in self.by_name:
            raise RequestValueError(f"a LoRA adapter named {name!r} is already loaded ({self.by_name[name].path})")
        adapter = LoraAdapter(self.model, name, path)
        self.by_name[name] = adapter
        return adapter

    def unload(self, name: str, context) -> bool:
        """Free an unused adapter; True when the context had it applied (its cache is stale now)."""
        adapter = self._get(name)
        if any(adapter is a for s in list(self._live) for a, _ in s.loras) or any(
            adapter is a for a, _ in self.default.loras
        ):
            raise RuntimeError(
                f"the LoRA adapter {name!r} is in use by an unfinished request or stream "
                "(or is the default set): finish or close it first"
            )
        was_applied = any(adapter is a for a, _ in self.applied.loras)
        if was_applied:
            lib.llama_set_adapters_lora(context.ptr, ffi.NULL, 0, ffi.NULL)
            self.applied = dataclasses.replace(self.applied, loras=())
        del self.by_name[name]
        adapter.close()
        return was_applied

    def default_loras(self) -> list[dict]:
        """The adapters of requests that name none, as ``[{"name", "scale"}]``."""
        return [{"name": a.name, "scale": s} for a, s in self.default.loras]

    def set_default_loras(self, active_loras) -> None:
        """Change the adapters of requests that name none (llama-server's global scales); requests
        already running keep theirs. The default control vector stays."""
        self.default = dataclasses.replace(self.select(active_loras, None), cvec=self.default.cvec)

    def info(self) -> dict[str, dict]:
        return {
            name: {"path": str(a.path), "alpha": a.alpha, "metadata": dict(a.metadata)}
            for name, a in self.by_name.items()
        }

    def _get(self, name) -> LoraAdapter:
        if name not in self.by_name:
            known = ", ".join(sorted(self.by_name)) or "none are loaded"
            raise RequestValueError(f"no LoRA adapter named {name!r} (loaded: {known})")
        return self.by_name[name]

    def select(self, active_loras, cvec_spec) -> Selection:
        """A request's selection, validated before any decoding."""
        if active_loras is None:
            loras = self.default.loras
        else:
            if isinstance(active_loras, (str, Mapping)) or not isinstance(active_loras, Sequence):
                raise RequestTypeError('active_loras must be a list of {"name": ..., "scale": ...} dicts')
            picked = []
            for item in active_loras:
                if not isinstance(item, Mapping) or "name" not in item or set(item) - {"name", "scale"}:
                    raise RequestValueError(f'active_loras entries are {{"name": str, "scale": float}}, got {item!r}')
                name = item["name"]
                picked.append((self._get(name), _finite_scale(f"LoRA {name!r}", item.get("scale", 1.0))))
            loras = tuple(picked)
        cvec = control_vector(cvec_spec, self.model.n_embd, lib.llama_model_n_layer(self.model.ptr))
        selection = Selection(loras, cvec)
        self._live.add(selection)
        return selection

    def apply(self, context, selection: Selection) -> bool:
        """Make the context compute under ``selection``; True when that changed anything."""
        if selection.key == self.applied.key:
            return False
        if selection.loras != self.applied.loras:
            n = len(selection.loras)
            ptrs = ffi.new("struct llama_adapter_lora *[]", [a.ptr for a, _ in selection.loras] or [ffi.NULL])
            scales = ffi.new("float[]", [s for _, s in selection.loras] or [0.0])
            if lib.llama_set_adapters_lora(context.ptr, ptrs if n else ffi.NULL, n, scales if n else ffi.NULL) != 0:
                raise RuntimeError("llama.cpp refused the LoRA adapter set")
        cvec = selection.cvec
        if cvec is None:
            lib.llama_set_adapter_cvec(context.ptr, ffi.NULL, 0, self.model.n_embd, 0, 0)
        else:
            data = ffi.from_buffer("float[]", cvec.data)
            if (
                lib.llama_set_adapter_cvec(
                    context.ptr, data, cvec.data.size, cvec.n_embd, cvec.layer_start, cvec.layer_end
                )
                != 0
            ):
                raise RuntimeError("llama.cpp refused the control vector")
        self.applied = Selection(selection.loras, selection.cvec)  # a copy: not a request's, not live
        return True

    def close(self) -> None:
        """Before the model is freed."""
        for adapter in self.by_name.values():
            adapter.close()
        self.by_name.clear()
        self.default = self.applied = BASE
