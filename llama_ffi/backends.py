"""ggml's backends: loaded from the package's own ``lib/`` folder when the build made them modules
(the portable wheel), described for ``build_info()``, and their functions that no linked library
exports (a module's are reached through its registry)."""

from __future__ import annotations

import os
from pathlib import Path

from llama_ffi import _cpu_variant
from llama_ffi._lib import ffi, lib

LIB_DIR = Path(__file__).resolve().parent / "lib"
CPU_MODULE_PREFIX = _cpu_variant.MODULE_PREFIX


class BackendError(RuntimeError):
    pass


def modules_built() -> bool:
    """True for a ``GGML_BACKEND_DL`` build: no backend is linked, each is a file ggml dlopens."""
    return bool(lib.LLAMA_FFI_BACKEND_DL)


def load_modules(folder: Path = LIB_DIR) -> None:
    """Register every backend module in ``folder``; of the CPU modules ggml keeps the one scoring
    best on this CPU. ggml's default search looks next to the Python executable and in the working
    directory, where a wheel's modules never are. ``GGML_BACKEND_PATH`` still adds one of the user's."""
    if not modules_built():
        return
    variant = _cpu_variant.requested()
    if variant is not None:
        load_with_cpu_variant(folder, variant)
    else:
        lib.ggml_backend_load_all_from_path(os.fsencode(folder))
    if lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU) == ffi.NULL:
        found = sorted(p.name for p in folder.glob(CPU_MODULE_PREFIX + "*.so"))
        raise ImportError(
            f"no CPU backend module in {folder} runs on this CPU (found: {', '.join(found) or 'none'}); "
            "reinstall llama-ffi, or build it for this machine from its source (`pip install .`)"
        )


def load_with_cpu_variant(folder: Path, variant: str) -> None:
    """Every backend module in ``folder`` but the CPU ones, then the CPU module ``variant``
    (``LLAMA_FFI_CPU_VARIANT``), which ggml refuses when this CPU cannot run it."""
    chosen = _cpu_variant.module_path(variant, folder)
    if not chosen.is_file():
        raise ImportError(
            f"{_cpu_variant.ENV}={variant!r}: no such CPU module in {folder} "
            f"(available: {', '.join(_cpu_variant.modules(folder)) or 'none'})"
        )
    if lib.ggml_backend_load(os.fsencode(chosen)) == ffi.NULL:
        raise ImportError(
            f"{_cpu_variant.ENV}={variant!r}: ggml did not load {chosen.name} "
            "(this CPU cannot run it; see the llama_ffi logger)"
        )
    others = [
        p
        for p in folder.glob("libggml-*.so")
        if not p.name.startswith(CPU_MODULE_PREFIX) and p.name != "libggml-base.so"
    ]
    extra = os.environ.get("GGML_BACKEND_PATH")
    for path in sorted(others) + ([Path(extra)] if extra else []):
        lib.ggml_backend_load(os.fsencode(path))


def registry(name: str):
    reg = lib.ggml_backend_reg_by_name(name.encode())
    if reg == ffi.NULL:
        raise BackendError(f"this build of llama.cpp has no {name} backend (loaded: {', '.join(backend_names())})")
    return reg


def function(backend: str, name: str, ctype: str):
    """``lib.<name>`` where a linked library exports it; else the backend's own entry
    (``ggml_backend_reg_get_proc_address``), as a callable of the C type ``ctype``."""
    bound = getattr(lib, name, None)
    if bound is not None:
        return bound
    address = lib.ggml_backend_reg_get_proc_address(registry(backend), name.encode())
    if address == ffi.NULL:
        raise BackendError(f"the {backend} backend does not provide {name}")
    return ffi.cast(ctype, address)


def library_of(address) -> str:
    buf = ffi.new("char[]", 4096)
    if lib.llama_ffi_library_of(ffi.cast("void *", address), buf, len(buf)) != 0:
        return ""
    return ffi.string(buf).decode()


def backend_names() -> list[str]:
    return [
        ffi.string(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i))).decode()
        for i in range(lib.ggml_backend_reg_count())
    ]


def cpu_library() -> str:
    """The file the CPU backend runs from (for a portable build, the variant ggml chose)."""
    cpu = lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU)
    if cpu == ffi.NULL:
        return ""
    reg = lib.ggml_backend_dev_backend_reg(cpu)
    return library_of(lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features"))


def cpu_variant(library: str) -> str:
    """The variant of a CPU library (``cpu_library()``): ``haswell``, ``zen4``, ... in a portable
    build; ``native`` for a build made for its CPU."""
    path = Path(library)
    name = path.name
    if path.parent.parent.name == _cpu_variant.LINKED_VARIANTS.name:  # LLAMA_FFI_CPU_VARIANT, linked build
        return path.parent.name
    if name.startswith(CPU_MODULE_PREFIX):
        return name[len(CPU_MODULE_PREFIX) :].split(".so")[0]
    return "native" if name else ""


_DEVICE_TYPES = {
    lib.GGML_BACKEND_DEVICE_TYPE_CPU: "cpu",
    lib.GGML_BACKEND_DEVICE_TYPE_GPU: "gpu",
    lib.GGML_BACKEND_DEVICE_TYPE_IGPU: "igpu",
    lib.GGML_BACKEND_DEVICE_TYPE_ACCEL: "accel",
}


def has_gpu() -> bool:
    """Whether ggml sees a GPU (discrete or integrated) to offload to."""
    return any(d["type"] in ("gpu", "igpu") for d in devices())


def devices() -> list[dict[str, object]]:
    """Every device ggml sees: name, description, type, backend and memory (bytes)."""
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        lib.ggml_backend_dev_memory(dev, free, total)
        out.append(
            {
                "name": ffi.string(lib.ggml_backend_dev_name(dev)).decode(),
                "description": ffi.string(lib.ggml_backend_dev_description(dev)).decode(),
                "type": _DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "other"),
                "backend": ffi.string(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))).decode(),
                "memory_free": free[0],
                "memory_total": total[0],
            }
        )
    return out
