"""Tiny multimodal projectors with seeded random weights, written with the pinned tree's gguf-py,
for a text model of ``n_embd_text``: a LLaVA-style vision one (a CLIP ViT and the "mlp" projector)
and a Qwen2-Audio-style audio one. llama-mtmd-cli loads both with SmolLM2 at this pin: it is the
oracle of tests/test_multimodal.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class _Weights:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def mat(self, *shape: int, scale: float | None = None, dtype=np.float16) -> np.ndarray:
        """Matrices and kernels (numpy shape: ggml's reversed), f16 as converted models have them."""
        scale = scale if scale is not None else 1.0 / np.sqrt(np.prod(shape[1:]))
        return (self.rng.standard_normal(shape) * scale).astype(dtype)

    def vec(self, n: int, base: float = 0.0, scale: float = 0.02) -> np.ndarray:
        """Norms and biases: f32."""
        return (base + self.rng.standard_normal(n) * scale).astype(np.float32)


def _header(
    w, modality: str, projector: str, n_embd_text: int, n_embd: int, n_head: int, n_ff: int, n_layer: int
) -> None:
    w.add_string("clip.projector_type", projector)
    w.add_bool(f"clip.has_{modality}_encoder", True)
    for key, value in (
        ("embedding_length", n_embd),
        ("feed_forward_length", n_ff),
        ("block_count", n_layer),
        ("projection_dim", n_embd_text),
        ("attention.head_count", n_head),
    ):
        w.add_uint32(f"clip.{modality}.{key}", value)
    w.add_float32(f"clip.{modality}.attention.layer_norm_epsilon", 1e-5)


def _blocks(w, x: _Weights, prefix: str, n_layer: int, n_embd: int, n_ff: int, k_bias: bool = True) -> None:
    """Pre-norm transformer blocks (ln1, attention, ln2, FFN) under ``prefix`` (v or a)."""
    for i in range(n_layer):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(f"{prefix}.blk.{i}.{name}.weight", x.mat(n_embd, n_embd))
            if name != "attn_k" or k_bias:
                w.add_tensor(f"{prefix}.blk.{i}.{name}.bias", x.vec(n_embd))
        for name in ("ln1", "ln2"):
            w.add_tensor(f"{prefix}.blk.{i}.{name}.weight", x.vec(n_embd, 1.0))
            w.add_tensor(f"{prefix}.blk.{i}.{name}.bias", x.vec(n_embd))
        w.add_tensor(f"{prefix}.blk.{i}.ffn_up.weight", x.mat(n_ff, n_embd))
        w.add_tensor(f"{prefix}.blk.{i}.ffn_up.bias", x.vec(n_ff))
        w.add_tensor(f"{prefix}.blk.{i}.ffn_down.weight", x.mat(n_embd, n_ff))
        w.add_tensor(f"{prefix}.blk.{i}.ffn_down.bias", x.vec(n_embd))


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_mmproj(
    path: Path,
    n_embd_text: int,
    seed: int = 0,
    image_size: int = 32,
    patch: int = 8,
    n_embd: int = 32,
    n_head: int = 2,
    n_ff: int = 64,
    n_layer: int = 2,
    hidden: int = 64,
) -> Path:
    """A CLIP ViT (patch embedding, class token, pre-norm) and LLaVA's MLP: mm.0, GELU, mm.2."""
    import gguf

    x, w = _Weights(seed), gguf.GGUFWriter(str(path), "clip")
    _header(w, "vision", "mlp", n_embd_text, n_embd, n_head, n_ff, n_layer)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    n_pos = (image_size // patch) ** 2 + 1
    w.add_tensor("v.patch_embd.weight", x.mat(n_embd, 3, patch, patch, scale=1.0 / patch))
    w.add_tensor("v.class_embd", x.vec(n_embd, scale=0.5))
    w.add_tensor("v.position_embd.weight", x.mat(n_pos, n_embd, scale=0.1))
    w.add_tensor("v.pre_ln.weight", x.vec(n_embd, 1.0))
    w.add_tensor("v.pre_ln.bias", x.vec(n_embd))
    _blocks(w, x, "v", n_layer, n_embd, n_ff)
    w.add_tensor("mm.0.weight", x.mat(hidden, n_embd))
    w.add_tensor("mm.0.bias", x.vec(hidden))
    w.add_tensor("mm.2.weight", x.mat(n_embd_text, hidden))
    w.add_tensor("mm.2.bias", x.vec(n_embd_text))
    _finish(w)
    return path


def write_audio_mmproj(
    path: Path,
    n_embd_text: int,
    seed: int = 0,
    n_mel: int = 128,
    n_embd: int = 32,
    n_head: int = 2,
    n_ff: int = 64,
    n_layer: int = 2,
    n_pos: int = 1500,
) -> Path:
    """Whisper's encoder (two conv1d, then blocks with no k bias, post-norm) and one linear layer
    to the text model; mtmd computes the log-mel input itself."""
    import gguf

    x, w = _Weights(seed), gguf.GGUFWriter(str(path), "clip")
    _header(w, "audio", "qwen2a", n_embd_text, n_embd, n_head, n_ff, n_layer)
    w.add_uint32("clip.audio.num_mel_bins", n_mel)
    w.add_tensor("a.conv1d.1.weight", x.mat(n_embd, n_mel, 3))
    w.add_tensor("a.conv1d.1.bias", x.vec(n_embd).reshape(n_embd, 1))  # ne = (1, n_embd): added per frame
    w.add_tensor("a.conv1d.2.weight", x.mat(n_embd, n_embd, 3))
    w.add_tensor("a.conv1d.2.bias", x.vec(n_embd).reshape(n_embd, 1))
    # f32: added to the activations as a view (the vision tower gathers its rows, so f16 works there)
    w.add_tensor("a.position_embd.weight", x.mat(n_pos, n_embd, scale=0.1, dtype=np.float32))
    _blocks(w, x, "a", n_layer, n_embd, n_ff, k_bias=False)
    w.add_tensor("a.post_ln.weight", x.vec(n_embd, 1.0))
    w.add_tensor("a.post_ln.bias", x.vec(n_embd))
    w.add_tensor("mm.a.fc.weight", x.mat(n_embd_text, n_embd))
    w.add_tensor("mm.a.fc.bias", x.vec(n_embd_text))
    _finish(w)
    return path
