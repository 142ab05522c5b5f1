"""GPU offload, for a build with a GPU backend (``CMAKE_ARGS="-DGGML_VULKAN=ON" pip install .``, or
CUDA, HIP, ...). They skip, with the reason, on a CPU-only build or where no device shows.

Vulkan without a GPU: Mesa's software device (lavapipe, ``mesa-vulkan-drivers``) runs it. ggml
hides CPU-type Vulkan devices unless ``GGML_VK_VISIBLE_DEVICES`` names them, so the runs here are
subprocesses with ``GGML_VK_VISIBLE_DEVICES=0`` unless the caller set it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import gpu_offload
import numpy as np
import pytest
from gpu_offload import N_TOKENS, PROMPT

import llama_ffi
from llama_ffi.testing import assert_same_or_near_tie, bound_across

GPU_BACKENDS = {"Vulkan", "CUDA", "HIP", "ROCm", "Metal", "SYCL", "MUSA", "OpenCL", "CANN"}


def run_on_gpu(tmp_path: Path, model: Path | None = None) -> dict:
    env = dict(os.environ)
    env.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
    return gpu_offload.run(sys.executable, env, Path(__file__).resolve().parent.parent, model, tmp_path / "logits.npy")


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    built = GPU_BACKENDS & set(llama_ffi.build_info()["backends"])
    if not built:
        pytest.skip(
            "this build has no GPU backend (CPU only): build with "
            'CMAKE_ARGS="-DGGML_VULKAN=ON" (or CUDA, HIP, ...) to run the GPU tests'
        )
    probe = run_on_gpu(tmp_path_factory.mktemp("probe"))
    if not probe["devices"]:
        pytest.skip(
            f"{', '.join(sorted(built))} built, but no device is present "
            "(for Vulkan without a GPU: install mesa-vulkan-drivers)"
        )
    return probe["devices"]


def test_every_layer_is_offloaded_and_greedy_text_matches_the_cpu(gpu, tmp_path, smollm2_path):
    from llama_ffi.high import Llama

    run = run_on_gpu(tmp_path, smollm2_path)
    (line,) = run["layers"]
    done, total = line.split("offloaded ")[1].split(" layers")[0].split("/")
    assert int(done) == int(total) > 0, line
    assert any(gpu[0]["name"] in m for m in run["buffers"]), run["buffers"]  # the weights live on the device
    (line,) = run["two_layers"]
    assert line.split("offloaded ")[1].startswith(f"2/{total} layers"), line
    offloaded = np.load(tmp_path / "logits.npy")
    with Llama(str(smollm2_path), n_ctx=256, device="CPU", progress=False) as llm:
        assert_same_or_near_tie(llm, PROMPT, run["text"], N_TOKENS, limit=bound_across(llm, offloaded))
