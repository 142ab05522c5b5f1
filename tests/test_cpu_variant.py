"""``LLAMA_FFI_CPU_VARIANT``: the CPU backend at another x86 level, here ggml's ``haswell`` (AVX2
without AVX-512), built by ``python -m tools.native_build --cpu-variant haswell`` (the CPU library
alone: about 30 seconds on 2 cores). The whole suite runs at that level with
``LLAMA_FFI_CPU_VARIANT=haswell python -m pytest -q tests`` (docs/testing.md); these
tests check the switch itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import reference_tools

from llama_ffi import _cpu_variant
from tools import native_build

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "The capital of France is"
PROBE = """
import json, sys
import llama_ffi
from llama_ffi import ffi, lib
from llama_ffi.high import Llama
info = llama_ffi.build_info()
with Llama(sys.argv[1], n_ctx=512, n_threads=2, progress=False) as llm:
    text = llm(sys.argv[2], max_tokens=16, temperature=0.0)["choices"][0]["text"]
print(json.dumps({"variant": info["cpu_variant"], "library": info["cpu_library"], "text": text,
                  "system": ffi.string(lib.llama_print_system_info()).decode()}))
"""


@pytest.fixture(scope="module")
def haswell(tree) -> Path:
    return native_build.build_cpu_variant(tree, "haswell")


def probe(model: Path, variant: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (_cpu_variant.ENV, "LD_LIBRARY_PATH")}
    if variant is not None:
        env[_cpu_variant.ENV] = variant
    return subprocess.run(
        [sys.executable, "-c", PROBE, str(model), PROMPT],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text()
    return set(next(line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")))


def test_haswell_runs_avx2_kernels_and_answers_as_llama_cpp_at_that_level(haswell, smollm2_path, llama_completion):
    wanted = haswell.with_name("features").read_text().split()
    assert "avx2" in wanted and "avx512f" not in wanted
    run = probe(smollm2_path, "haswell")
    if not set(wanted) <= cpu_flags():  # a CPU older than AVX2: refused by name, never SIGILL
        assert run.returncode != 0 and "lacks" in run.stderr, run.stderr[-2000:]
        return
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["variant"] == "haswell" and Path(got["library"]).resolve() == haswell.resolve()
    assert "AVX2 = 1" in got["system"] and "AVX512" not in got["system"]
    # llama.cpp's own program with the same CPU library: the same kernels, the same batch shapes
    env = dict(os.environ, LD_LIBRARY_PATH=str(haswell.parent))
    want = reference_tools.completion(llama_completion, smollm2_path, PROMPT, 16, 512, ["--temp", "0"], env=env)
    assert got["text"] == want


def test_without_the_switch_the_build_runs_its_own_cpu_library(smollm2_path):
    run = probe(smollm2_path, None)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["variant"] == "native" and Path(got["library"]).parent.name == "lib"


def test_an_unknown_variant_is_refused_naming_those_there_are(haswell, smollm2_path):
    run = probe(smollm2_path, "zen9")
    assert run.returncode != 0
    assert "LLAMA_FFI_CPU_VARIANT='zen9'" in run.stderr and "haswell" in run.stderr
    assert "--cpu-variant zen9" in run.stderr


def test_the_variant_table_is_the_trees(tree):
    variants = native_build.cpu_variants(tree)
    assert variants["haswell"] == ["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"]
    assert "AVX512" in variants["skylakex"] and "x64" in variants
    with pytest.raises(native_build.NativeBuildError, match="no CPU variant 'zen9'"):
        native_build.build_cpu_variant(tree, "zen9")
