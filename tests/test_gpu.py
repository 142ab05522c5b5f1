"""GPU offload, for a build with a GPU backend (``CMAKE_ARGS="-DGGML_VULKAN=ON" pip install .``, or
CUDA, HIP, ...). They skip, with the reason, on a CPU-only build or where no device shows.

Vulkan without a GPU: Mesa's software device (lavapipe, ``mesa-vulkan-drivers``) runs it. ggml
hides CPU-type Vulkan devices unless ``GGML_VK_VISIBLE_DEVICES`` names them, so the runs here are
subprocesses with ``GGML_VK_VISIBLE_DEVICES=0`` unless the caller set it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import llama_ffi
from llama_ffi.near_tie import assert_same_or_near_tie, bound_across

GPU_BACKENDS = {"Vulkan", "CUDA", "HIP", "ROCm", "Metal", "SYCL", "MUSA", "OpenCL", "CANN"}
PROMPT = "The capital of France is"
N_TOKENS = 32

_RUN = """
import json, logging, sys
import numpy as np
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("llama_ffi").addHandler(Keep())
logging.getLogger("llama_ffi").setLevel(logging.INFO)
import llama_ffi
from llama_ffi import Llama
devices = [d for d in llama_ffi.build_info()["devices"] if d["type"] in ("gpu", "igpu")]
result = {"devices": devices}
if devices and len(sys.argv) > 2:
    llm = Llama(sys.argv[1], n_ctx=256, n_gpu_layers=-1, progress=False)
    result["layers"] = [m for m in records if "offloaded " in m and "layers to GPU" in m]
    result["buffers"] = [m for m in records if "model buffer size" in m]
    out = llm.create_completion(%(prompt)r, max_tokens=%(n)d, temperature=0.0)
    result["text"] = out["choices"][0]["text"]
    sys.path.insert(0, %(tests)r)
    from llama_ffi.near_tie import stepwise_logits
    np.save(sys.argv[2], stepwise_logits(llm))
    llm.close()
    # Two layers on the first GPU, no split: the parameters reach llama.cpp.
    records.clear()
    Llama(sys.argv[1], n_ctx=256, n_gpu_layers=2, split_mode=0, main_gpu=0, progress=False).close()
    result["two_layers"] = [m for m in records if "offloaded " in m and "layers to GPU" in m]
print(json.dumps(result))
"""


def run_on_gpu(tmp_path: Path, model: Path | None = None) -> dict:
    env = dict(os.environ)
    env.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
    args = [str(model), str(tmp_path / "logits.npy")] if model else []
    code = _RUN % {"prompt": PROMPT, "n": N_TOKENS, "tests": str(Path(__file__).resolve().parent)}
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
