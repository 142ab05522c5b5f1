"""The build backend's config settings: llama.cpp's CMake options from ``--config-settings``
(which a requirements file can hold), on top of ``CMAKE_ARGS`` from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools.build_backend import environment

REPO = Path(__file__).resolve().parent.parent


def test_cmake_args_come_after_the_environment_and_repeat():
    base = {"CMAKE_ARGS": "-DGGML_CUDA=OFF"}
    assert environment({"cmake.args": "-DGGML_CUDA=ON"}, base) == {"CMAKE_ARGS": "-DGGML_CUDA=OFF -DGGML_CUDA=ON"}
    repeated = environment({"cmake.args": ["-DGGML_VULKAN=ON", "-DGGML_RPC=OFF"]}, {})
    assert repeated == {"CMAKE_ARGS": "-DGGML_VULKAN=ON -DGGML_RPC=OFF"}
    assert environment({"cmake.build-dir": "build/gpu"}, {}) == {"LLAMA_FFI_BUILD_DIR": os.path.abspath("build/gpu")}
    assert environment({"--build-option": "x"}, base) == {} and environment(None, base) == {}


def test_pip_passes_the_settings_to_llama_cpps_cmake(tmp_path):
    """A real ``pip wheel . --config-settings ...``, isolated as a user's: the CMake configure it
    starts (in the build folder the settings name) carries the setting's argument. A compiler that
    does not exist makes that configure fail at once, so nothing is built."""
    probe = "/nonexistent/config-settings-probe-cc"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            ".",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path / "wheels"),
            "--config-settings",
            f"cmake.args=-DCMAKE_C_COMPILER={probe}",
            "--config-settings",
            f"cmake.build-dir={tmp_path / 'build'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode != 0  # the probe compiler cannot configure
    cache = (tmp_path / "build" / "CMakeCache.txt").read_text()
    assert f"CMAKE_C_COMPILER:UNINITIALIZED={probe}" in cache, [s for s in cache.splitlines() if "C_COMPILER" in s]
