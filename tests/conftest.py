"""Shared fixtures: the materialised llama.cpp tree and real models fetched from the registry."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis runs derandomised by default (the README's test command, CI): a red run reproduces
# with the same examples. HYPOTHESIS_PROFILE=explore draws new examples each run.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # build-time tools (tools.vendor, build_ffi) for their tests

from tools.vendor import materialise  # noqa: E402

# Every prompt evaluation checks that the KV cache's highest position is what the token list says
# (llama_ffi.high.context.Context.check_positions): a bookkeeping error fails loudly in any test.
os.environ.setdefault("LLAMA_FFI_CHECK_CACHE", "1")

# LLAMA_FFI_CPU_VARIANT (llama_ffi/_cpu_variant.py) with a linked build: llama.cpp's reference
# programs and every other subprocess load the same CPU library, so oracles compute as we do.
_variant = os.environ.get("LLAMA_FFI_CPU_VARIANT", "").strip()
if _variant and (REPO_ROOT / "llama_ffi" / "lib" / "cpu-variants" / _variant).is_dir():
    _variant_dir = str(REPO_ROOT / "llama_ffi" / "lib" / "cpu-variants" / _variant)
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [_variant_dir, os.environ.get("LD_LIBRARY_PATH")]))

TREE = materialise()
sys.path.insert(0, str(TREE.path / "gguf-py"))  # the pinned tree's own gguf-py


@pytest.fixture(scope="session")
def tree():
    return TREE


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    from llama_ffi import registry

    return registry.fetch(registry.SMOLLM2)


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    from llama_ffi import registry

    return registry.fetch(registry.GEMMA3_270M)


@pytest.fixture(scope="session")
def tiny_config():
    from tiny_llama import TinyConfig

    return TinyConfig()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory, tiny_config) -> Path:
    from tiny_llama import write_gguf

    return write_gguf(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf", tiny_config)


@pytest.fixture(scope="session")
def mtmd_cli(tree):
    """llama.cpp's llama-mtmd-cli from the pinned tree."""
    from tools.native_build import build_reference_tools

    return build_reference_tools(tree, ("llama-mtmd-cli",)) / "llama-mtmd-cli"


@pytest.fixture(scope="session")
def llama_completion(tree):
    """llama.cpp's llama-completion from the pinned tree (built once, kept in build/)."""
    from tools.native_build import build_reference_tools

    return build_reference_tools(tree, ("llama-completion",)) / "llama-completion"
