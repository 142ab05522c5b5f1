"""A tiny LLaVA-style mmproj (a CLIP ViT of 2 blocks and the "mlp" projector, seeded random
weights) for a text model of ``n_embd_text``, written with the pinned tree's gguf-py. At this pin
llama-mtmd-cli loads it with SmolLM2 and answers about an image: the start of the multimodal work
(issue 17), whose oracle it is meant for."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def write_mmproj(path: Path, n_embd_text: int, seed: int = 0, image_size: int = 32, patch: int = 8,
                 n_embd: int = 32, n_head: int = 2, n_ff: int = 64, n_layer: int = 2, hidden: int = 64) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.projection_dim", n_embd_text)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    def mat(*shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
        return (rng.standard_normal(shape) * scale).astype(np.float16)
    def vec(n, base=0.0, scale=0.02):
        return (base + rng.standard_normal(n) * scale).astype(np.float32)
    n_pos = (image_size // patch) ** 2 + 1
    w.add_tensor("v.patch_embd.weight", mat(n_embd, 3, patch, patch, scale=1.0 / patch))
    w.add_tensor("v.class_embd", vec(n_embd, scale=0.5))
    w.add_tensor("v.position_embd.weight", (rng.standard_normal((n_pos, n_embd)) * 0.1).astype(np.float16))
    w.add_tensor("v.pre_ln.weight", vec(n_embd, 1.0))
    w.add_tensor("v.pre_ln.bias", vec(n_embd))
    for i in range(n_layer):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(f"v.blk.{i}.{name}.weight", mat(n_embd, n_embd))
            w.add_tensor(f"v.blk.{i}.{name}.bias", vec(n_embd))
        for name in ("ln1", "ln2"):
            w.add_tensor(f"v.blk.{i}.{name}.weight", vec(n_embd, 1.0))
            w.add_tensor(f"v.blk.{i}.{name}.bias", vec(n_embd))
        w.add_tensor(f"v.blk.{i}.ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(f"v.blk.{i}.ffn_up.bias", vec(n_ff))
        w.add_tensor(f"v.blk.{i}.ffn_down.weight", mat(n_embd, n_ff))
        w.add_tensor(f"v.blk.{i}.ffn_down.bias", vec(n_embd))
    w.add_tensor("mm.0.weight", mat(hidden, n_embd))  # the MLP projector: mm.0, GELU, mm.2
    w.add_tensor("mm.0.bias", vec(hidden))
    w.add_tensor("mm.2.weight", mat(n_embd_text, hidden))
    w.add_tensor("mm.2.bias", vec(n_embd_text))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
