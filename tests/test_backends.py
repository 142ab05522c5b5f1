"""ggml's backends as the package sees them: build_info(), functions reached through a backend's
registry, and the CPU module the build runs on."""

from __future__ import annotations

from pathlib import Path

import pytest

import llama_ffi
from llama_ffi import _cpu_variant, backends, ffi, lib


def test_build_info_names_the_backends_devices_and_cpu_library():
    info = llama_ffi.build_info()
    assert "CPU" in info["backends"] and "RPC" in info["backends"]
    cpu = [d for d in info["devices"] if d["type"] == "cpu"]
    assert cpu and cpu[0]["backend"] == "CPU" and cpu[0]["memory_total"] > 0
    # The CPU backend runs from a library of this package (never one found elsewhere).
    forced = _cpu_variant.requested()
    if info["backend_modules"]:
        assert Path(info["cpu_library"]).resolve().parent == backends.LIB_DIR
        assert Path(info["cpu_library"]).name == f"libggml-cpu-{info['cpu_variant']}.so"
        assert forced in (None, info["cpu_variant"])
    elif forced:  # LLAMA_FFI_CPU_VARIANT with a linked build: the variant's library, loaded first
        assert info["cpu_variant"] == forced
        assert Path(info["cpu_library"]).resolve() == _cpu_variant.linked_path(forced)
        assert "AVX512" not in ffi.string(lib.llama_print_system_info()).decode() or forced != "haswell"
    else:
        assert Path(info["cpu_library"]).resolve().parent == backends.LIB_DIR
        assert info["cpu_variant"] == "native" and Path(info["cpu_library"]).name == "libggml-cpu.so"


def test_a_function_no_library_exports_comes_from_the_backend_registry():
    # ggml_backend_get_features is only a CPU-registry entry: the lookup path a portable build
    # uses for every backend function (RPC's included).
    assert not hasattr(lib, "ggml_backend_get_features")
    get_features = backends.function(
        "CPU", "ggml_backend_get_features", "struct ggml_backend_feature * (*)(ggml_backend_reg_t)"
    )
    feature = get_features(backends.registry("CPU"))
    names = []
    while feature.name != ffi.NULL:
        names.append(ffi.string(feature.name).decode())
        feature += 1
    assert names, "the CPU backend reported no features"
    flags = Path("/proc/cpuinfo").read_text().split()
    if "avx2" in flags:  # an x86 CPU with AVX2 runs a library built with it
        assert "AVX2" in names


def test_a_linked_function_is_the_bound_one():
    assert (
        backends.function("RPC", "ggml_backend_rpc_add_server", "ggml_backend_reg_t (*)(const char *)")
        is lib.ggml_backend_rpc_add_server
    )


def test_a_missing_backend_or_function_is_named():
    with pytest.raises(backends.BackendError, match="no NoSuchGPU backend"):
        backends.registry("NoSuchGPU")
    with pytest.raises(backends.BackendError, match="CPU backend does not provide ggml_no_such_function"):
        backends.function("CPU", "ggml_no_such_function", "void (*)(void)")
