"""ggml's backend devices by name, as llama.cpp's ``--device`` and ``rpc-server -d`` name them."""

from __future__ import annotations

from llama_ffi import ffi, lib


def device_names() -> list[str]:
    return [
        ffi.string(lib.ggml_backend_dev_name(lib.ggml_backend_dev_get(i))).decode()
        for i in range(lib.ggml_backend_dev_count())
    ]


def device_by_name(name: str):
    """The ``ggml_backend_dev_t`` called ``name``; ValueError naming the known ones otherwise."""
    dev = lib.ggml_backend_dev_by_name(name.encode())
    if dev == ffi.NULL:
        raise ValueError(f"unknown device {name!r}; this build has: {', '.join(device_names())}")
    return dev
