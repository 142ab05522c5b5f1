"""Tiny Qwen multimodal fixtures with seeded random weights (docs/fixtures.md):

- projectors built in transformers from tiny configs and converted by the pinned tree's own
  ``convert_hf_to_gguf.py --mmproj`` (no tokenizer needed): Qwen2.5-VL, Qwen3-VL, Qwen3-ASR;
- text models written with gguf-py, because their conversion wants a tokenizer we lack: the
  architecture of the family (``qwen2vl``: M-RoPE; ``qwen3vl``: interleaved M-RoPE and deepstack
  inputs), every ``tokenizer.*`` key copied from SmolLM2's GGUF, and the family's chat template.

llama-mtmd-cli loads the same files: it is the oracle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from tiny_llama import finish

WIDTH = 64  # the text models' embedding width, which every projector here outputs
HEAD_DIM = 16  # 4 heads; the M-RoPE sections below split its 8 rotary pairs
ROPE_SECTIONS = [2, 3, 3, 0]
# The families' templates that the pinned tree does not carry, written here in the shape their
# Hugging Face templates have: Qwen2-VL's (a default system message; image parts as
# <|vision_start|><|image_pad|><|vision_end|>) and Qwen3-ASR's (audio parts as
# <|audio_start|><|audio_pad|><|audio_end|>; the user's text parts dropped, so instructions go in
# the system message). Qwen3-VL and Gemma 4 use the tree's own (models/templates).
QWEN2VL_TEMPLATE = r"""{%- set image_count = namespace(value=0) -%}
{%- for message in messages -%}
{%- if loop.first and message['role'] != 'system' -%}
{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' -}}
{%- endif -%}
{{- '<|im_start|>' + message['role'] + '\n' -}}
{%- if message['content'] is string -%}
{{- message['content'] -}}
{%- else -%}
{%- for content in message['content'] -%}
{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}
{%- set image_count.value = image_count.value + 1 -%}
{%- if add_vision_id -%}{{- 'Picture ' ~ image_count.value ~ ': ' -}}{%- endif -%}
{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
{%- elif 'text' in content -%}
{{- content['text'] -}}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""
QWEN3ASR_TEMPLATE = r"""{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' -}}
{%- if message['content'] is string -%}
{{- message['content'] -}}
{%- else -%}
{%- for part in message['content'] -%}
{%- if part['type'] == 'audio' -%}
{{- '<|audio_start|><|audio_pad|><|audio_end|>' -}}
{%- elif part['type'] == 'text' and message['role'] != 'user' -%}
{{- part['text'] -}}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""
VISION_MEAN_STD = {"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}


# ---- projectors (transformers -> convert_hf_to_gguf.py --mmproj) ---------------------------------


def _convert(
    model,
    hf_dir: Path,
    tree: Path,
    out: Path,
    preprocessor: dict,
    config_extra: dict | None = None,
    prefixes: dict[str, str] | None = None,
) -> Path:
    """Save ``model`` and convert its projector; ``config_extra`` adds config keys and ``prefixes``
    renames tensor prefixes, where the converter expects a checkpoint's layout, not transformers'."""
    model.save_pretrained(hf_dir)
    if prefixes:
        from safetensors.torch import load_file, save_file

        weights = hf_dir / "model.safetensors"
        tensors = load_file(weights)
        for old, new in prefixes.items():
            tensors = {new + k[len(old) :] if k.startswith(old) else k: v for k, v in tensors.items()}
        save_file(tensors, weights, metadata={"format": "pt"})
    if config_extra:
        config = json.loads((hf_dir / "config.json").read_text())
        (hf_dir / "config.json").write_text(json.dumps({**config, **config_extra}))
    (hf_dir / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    proc = subprocess.run(
        [
            sys.executable,
            str(tree / "convert_hf_to_gguf.py"),
            str(hf_dir),
            "--mmproj",
            "--outtype",
            "f16",
            "--outfile",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py --mmproj failed:\n{proc.stderr[-3000:]}")
    return out


def _text_config(**extra) -> dict:
    return dict(
        vocab_size=1024,
        hidden_size=WIDTH,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        **extra,
    )


def write_qwen25vl_mmproj(path: Path, tree: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    if path.is_file():
        return path
    torch.manual_seed(seed)
    # 3 blocks: the converter maps merger.mlp.2 through the block table (docs/fixtures.md)
    vision = dict(
        depth=3,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=WIDTH,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        window_size=56,
        fullatt_block_indexes=[1],
    )  # windowed blocks 0 and 2: mtmd sets a window mask only when one is used
    config = Qwen2_5_VLConfig(
        text_config=_text_config(rope_scaling={"type": "mrope", "mrope_section": ROPE_SECTIONS[:3]}),
        vision_config=vision,
    )
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    pre = {
        **VISION_MEAN_STD,
        "patch_size": 14,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "min_pixels": 56 * 56,
        "max_pixels": 14 * 14 * 4 * 64,
    }
    return _convert(model, path.with_suffix(".hf"), tree, path, pre)


# ---- text models (gguf-py) ----------------------------------------------------------------------


def copy_tokenizer(writer, source: Path) -> int:
    """Every ``tokenizer.*`` key of ``source`` but its chat template; returns the vocabulary size."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.") or key.startswith("tokenizer.chat_template"):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(key, value, vtype, sub)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(value)
    return n_vocab


def write_text_model(
    path: Path, arch: str, tokenizer_source: Path, chat_template: str, deepstack: int = 0, seed: int = 1
) -> Path:
    """A 2-layer text model of ``arch`` (llama, qwen2vl or qwen3vl) and width WIDTH, with the
    tokenizer of ``tokenizer_source`` and ``chat_template``. ``deepstack``: qwen3vl's extra input
    embeddings per position (what a Qwen3-VL projector with that many deepstack layers sends)."""
    import gguf

    if path.is_file():
        return path
    rng = np.random.default_rng(seed)
    n_head, n_head_kv, n_ff, n_layer = WIDTH // HEAD_DIM, 2, 128, 2
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_context_length(4096)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(HEAD_DIM)
    if arch in ("qwen2vl", "qwen3vl"):
        writer.add_rope_dimension_sections(ROPE_SECTIONS)
    if arch == "qwen3vl":
        writer.add_num_deepstack_layers(deepstack)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_vocab = copy_tokenizer(writer, tokenizer_source)
    writer.add_chat_template(chat_template)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n: int = WIDTH) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    kv = n_head_kv * HEAD_DIM
    tensors = {"token_embd.weight": rng.standard_normal((n_vocab, WIDTH)).astype(np.float32)}
    for i in range(n_layer):
        p = f"blk.{i}."
        tensors.update(
            {
                p + "attn_norm.weight": norm(),
                p + "attn_q.weight": mat(WIDTH, WIDTH),
                p + "attn_k.weight": mat(kv, WIDTH),
                p + "attn_v.weight": mat(kv, WIDTH),
                p + "attn_output.weight": mat(WIDTH, WIDTH),
                p + "ffn_norm.weight": norm(),
                p + "ffn_gate.weight": mat(n_ff, WIDTH),
                p + "ffn_up.weight": mat(n_ff, WIDTH),
                p + "ffn_down.weight": mat(WIDTH, n_ff),
            }
        )
        if arch == "qwen3vl":
            tensors[p + "attn_q_norm.weight"] = norm(HEAD_DIM)
            tensors[p + "attn_k_norm.weight"] = norm(HEAD_DIM)
    tensors["output_norm.weight"] = norm()
    tensors["output.weight"] = mat(n_vocab, WIDTH) * 4.0  # spread logits: fewer near ties
    return finish(writer, path, tensors)


QWEN3VL_DEEPSTACK = [1]  # vision blocks whose features also go to the text model (deepstack)


def write_qwen3vl_mmproj(path: Path, tree: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    if path.is_file():
        return path
    torch.manual_seed(seed)
    vision = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=WIDTH,
        patch_size=16,
        spatial_merge_size=2,
        temporal_patch_size=2,
        num_position_embeddings=64,
        deepstack_visual_indexes=QWEN3VL_DEEPSTACK,
    )
    text = _text_config(
        head_dim=HEAD_DIM,
        rope_scaling={"rope_type": "default", "mrope_section": ROPE_SECTIONS[:3], "mrope_interleaved": True},
    )
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(text_config=text, vision_config=vision)).eval()
    pre = {
        **VISION_MEAN_STD,
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "size": {"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 256},
    }
    return _convert(model, path.with_suffix(".hf"), tree, path, pre)


def write_qwen3asr_mmproj(path: Path, tree: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    if path.is_file():
        return path
    torch.manual_seed(seed)
    # 128 mel bins, as mtmd computes them; 4 layers: the converter maps conv2d1..3 through the
    # block table (as Qwen2.5-VL's merger)
    audio = dict(
        num_mel_bins=128,
        encoder_layers=4,
        encoder_attention_heads=2,
        encoder_ffn_dim=64,
        d_model=32,
        output_dim=WIDTH,
        downsample_hidden_size=16,
        n_window=50,
        n_window_infer=800,
    )
    config = Qwen3ASRConfig(audio_config=audio, text_config=_text_config(head_dim=HEAD_DIM))
    model = Qwen3ASRForConditionalGeneration(config).eval()
    # the converter reads the audio tower's config where Qwen's own checkpoints keep it
    thinker = {
        "thinker_config": {"audio_config": config.audio_config.to_dict(), "text_config": config.text_config.to_dict()}
    }
    return _convert(
        model,
        path.with_suffix(".hf"),
        tree,
        path,
        {"feature_size": 128},
        thinker,
        {
            "model.audio_tower.": "thinker.audio_tower.",
            "model.multi_modal_projector.linear_1.": "thinker.audio_tower.proj1.",
            "model.multi_modal_projector.linear_2.": "thinker.audio_tower.proj2.",
        },
    )
