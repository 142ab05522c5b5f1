"""Synthetic adapters for a real model, written with the pinned tree's gguf-py: seeded random LoRA
adapters on the attention projections, and control vectors with one direction per layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def tensor_shapes(model: Path) -> dict[str, tuple[int, ...]]:
    """name → ggml shape (ne0 first) of every tensor of a GGUF."""
    import gguf

    return {t.name: tuple(int(x) for x in t.shape) for t in gguf.GGUFReader(str(model)).tensors}


def write_lora(
    path: Path,
    model: Path,
    seed: int,
    rank: int = 8,
    alpha: float = 16.0,
    targets: tuple[str, ...] = ("attn_q", "attn_v"),
    strength: float = 0.06,
    arch: str = "llama",
    dtype=np.float16,
) -> Path:
    """``lora_a`` (ne = in × rank) and ``lora_b`` (ne = rank × out) for every target weight."""
    import gguf

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", alpha)
    for name, shape in sorted(tensor_shapes(model).items()):
        if not name.endswith(".weight") or name.split(".")[-2] not in targets:
            continue
        n_in, n_out = shape[0], shape[1]
        # f16 by default, as convert_lora_to_gguf writes them
        a = (rng.standard_normal((rank, n_in)) / np.sqrt(n_in)).astype(dtype)
        b = (rng.standard_normal((n_out, rank)) * strength).astype(dtype)
        writer.add_tensor(f"{name}.lora_a", a)  # numpy shape is ggml's reversed
        writer.add_tensor(f"{name}.lora_b", b)
    _finish(writer)
    return path


def control_vector_rows(n_embd: int, n_layer: int, seed: int, strength: float = 0.5) -> np.ndarray:
    """(n_layer - 1) × n_embd: llama.cpp's layout, row i for layer i + 1."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n_layer - 1, n_embd)) * strength).astype(np.float32)


def write_control_vector(path: Path, rows: np.ndarray, arch: str = "llama") -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "controlvector")
    writer.add_string("controlvector.model_hint", arch)
    writer.add_int32("controlvector.layer_count", len(rows))
    for i, row in enumerate(rows):
        writer.add_tensor(f"direction.{i + 1}", np.ascontiguousarray(row, dtype=np.float32))
    _finish(writer)
    return path


def _finish(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
