"""A tiny Gemma 4 projector (vision and audio) with seeded random weights, converted by the pinned
tree's own ``convert_hf_to_gguf.py --mmproj`` from a transformers config (docs/fixtures.md). mtmd checks
only the output width against the text model: 576 pairs it with SmolLM2 (whose Q4_1 kernels give
the same logits whatever the batch shape, so a cache reused or evaluated afresh must agree), 640
with gemma-3-270m. llama-mtmd-cli is the oracle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _config(text_width: int):
    from transformers import Gemma4AudioConfig, Gemma4Config, Gemma4TextConfig, Gemma4VisionConfig

    text = Gemma4TextConfig(
        vocab_size=1024,
        vocab_size_per_layer_input=1024,
        hidden_size=text_width,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        global_head_dim=32,
        hidden_size_per_layer_input=0,
        layer_types=["sliding_attention", "full_attention"],
    )
    vision = Gemma4VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        patch_size=16,
        pooling_kernel_size=3,
        position_embedding_size=1024,
    )
    # channels[0] = 128: llama.cpp sizes the conformer's input projection from 128 mel bins / 4
    audio = Gemma4AudioConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        subsampling_conv_channels=[128, 16],
        output_proj_dims=32,
    )
    return Gemma4Config(text_config=text, vision_config=vision, audio_config=audio)


def write_gemma4_mmproj(path: Path, tree: Path, text_width: int, seed: int = 0) -> Path:
    """Build the model in transformers, save it next to ``path`` and convert its projector."""
    import torch
    from transformers import Gemma4ForConditionalGeneration

    if path.is_file():
        return path
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(_config(text_width)).eval()
    hf_dir = path.with_suffix(".hf")
    model.save_pretrained(hf_dir)
    # The image processor's normalisation (Gemma 4 rescales to [0, 1] and does not normalise).
    (hf_dir / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.0] * 3, "image_std": [1.0] * 3}))
    subprocess.run(
        [
            sys.executable,
            str(tree / "convert_hf_to_gguf.py"),
            str(hf_dir),
            "--mmproj",
            "--outtype",
            "f16",
            "--outfile",
            str(path),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return path
