"""A model offloaded to the GPU in a subprocess of any Python that has llama-ffi (this one, or the
venv of a wheel): the devices ggml shows, the offload lines llama.cpp logs, the greedy text of
``PROMPT``, and the logits of a fixed text (to measure how far the device is from the CPU)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

PROMPT = "The capital of France is"
N_TOKENS = 32

SCRIPT = """
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
    from llama_ffi.testing import stepwise_logits
    np.save(sys.argv[2], stepwise_logits(llm))
    llm.close()
    # Two layers on the first GPU, no split: the parameters reach llama.cpp.
    records.clear()
    Llama(sys.argv[1], n_ctx=256, n_gpu_layers=2, split_mode=0, main_gpu=0, progress=False).close()
    result["two_layers"] = [m for m in records if "offloaded " in m and "layers to GPU" in m]
print(json.dumps(result))
"""


def run(python: str | Path, env: dict, cwd: Path, model: Path | None = None, logits: Path | None = None) -> dict:
    """``python`` runs ``SCRIPT``: the devices only, or with ``model`` the offloaded runs too (the
    logits saved to ``logits``)."""
    args = [str(model), str(logits)] if model else []
    code = SCRIPT % {"prompt": PROMPT, "n": N_TOKENS}
    proc = subprocess.run(
        [str(python), "-c", code, *args], env=env, capture_output=True, text=True, timeout=900, cwd=cwd
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
