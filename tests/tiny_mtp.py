"""A synthetic tiny GLM-4.5-style model (glm4moe: one dense layer, one MoE layer) with one NextN /
MTP block, written with gguf-py from seeded random weights, on the tiny llama vocabulary.

llama.cpp runs multi-token prediction only for architectures that ship NextN blocks (GLM-4.5,
Qwen3.5, DeepSeek, ...), all of them far too large for tests; this model has the same tensors at
toy sizes, so the DRAFT_MTP engine runs against llama.cpp's real MTP graph.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from tiny_llama import add_vocabulary, finish


@dataclasses.dataclass(frozen=True)
class TinyMtpConfig:
    n_vocab: int = 320
    n_embd: int = 64
    n_trunk: int = 2  # layer 0 dense, layer 1 MoE
    n_nextn: int = 1  # MTP blocks after the trunk
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_ctx_train: int = 512
    seed: int = 4321
    # Zero attention outputs and FFN down projections: the trunk's next token then depends on the
    # current token alone, and an identity eh_proj makes the MTP block compute that same function
    # one step ahead. Its drafts are then exactly the model's own continuation.
    bigram: bool = False

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def weights(cfg: TinyMtpConfig) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(cfg.seed)
    e = cfg.n_embd

    def mat(*shape: int) -> np.ndarray:  # (..., out, in) like PyTorch
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n: int = e) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    kv = cfg.n_head_kv * cfg.head_dim
    w = {
        "token_embd.weight": rng.standard_normal((cfg.n_vocab, e)).astype(np.float32),
        "output_norm.weight": norm(),
        "output.weight": mat(cfg.n_vocab, e) * 4.0,
    }
    for i in range(cfg.n_trunk + cfg.n_nextn):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm()
        w[p + "attn_q.weight"] = mat(e, e)
        w[p + "attn_k.weight"] = mat(kv, e)
        w[p + "attn_v.weight"] = mat(kv, e)
        w[p + "attn_output.weight"] = mat(e, e)
        w[p + "post_attention_norm.weight"] = norm()
        if i == 0:  # the leading dense block
            w[p + "ffn_gate.weight"] = mat(cfg.n_ff, e)
            w[p + "ffn_up.weight"] = mat(cfg.n_ff, e)
            w[p + "ffn_down.weight"] = mat(e, cfg.n_ff)
        else:
            w[p + "ffn_gate_inp.weight"] = mat(cfg.n_expert, e)
            w[p + "exp_probs_b.bias"] = np.zeros(cfg.n_expert, dtype=np.float32)
            w[p + "ffn_gate_exps.weight"] = mat(cfg.n_expert, cfg.n_ff_exp, e)
            w[p + "ffn_up_exps.weight"] = mat(cfg.n_expert, cfg.n_ff_exp, e)
            w[p + "ffn_down_exps.weight"] = mat(cfg.n_expert, e, cfg.n_ff_exp)
            w[p + "ffn_gate_shexp.weight"] = mat(cfg.n_ff_exp, e)
            w[p + "ffn_up_shexp.weight"] = mat(cfg.n_ff_exp, e)
            w[p + "ffn_down_shexp.weight"] = mat(e, cfg.n_ff_exp)
        if i >= cfg.n_trunk:  # NextN: [enorm(embed(x_{t+1})); hnorm(h_t)] -> eh_proj -> block
            w[p + "nextn.eh_proj.weight"] = mat(e, 2 * e)
            w[p + "nextn.enorm.weight"] = norm()
            w[p + "nextn.hnorm.weight"] = norm()
            w[p + "nextn.shared_head_norm.weight"] = norm()
    if cfg.bigram:
        for name in w:
            if name.endswith(
                ("attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight")
            ):
                w[name][...] = 0.0
        for i in range(cfg.n_trunk, cfg.n_trunk + cfg.n_nextn):
            p = f"blk.{i}.nextn."
            w[p + "eh_proj.weight"] = np.hstack([np.eye(e), np.zeros((e, e))]).astype(np.float32)
            w[p + "enorm.weight"] = np.ones(e, dtype=np.float32)
            w[p + "shared_head_norm.weight"] = w["output_norm.weight"].copy()
    return w


def write_gguf(path: Path, cfg: TinyMtpConfig = TinyMtpConfig(), mtp_only: bool = False) -> Path:
    """``mtp_only``: only the NextN blocks and the shared tensors (an external MTP file)."""
    import gguf  # the materialised tree's gguf-py, put on sys.path by conftest

    writer = gguf.GGUFWriter(str(path), "glm4moe")
    writer.add_name("tiny-glm4moe-mtp")
    writer.add_context_length(cfg.n_ctx_train)
    writer.add_embedding_length(cfg.n_embd)
    writer.add_block_count(cfg.n_trunk + cfg.n_nextn)
    writer.add_nextn_predict_layers(cfg.n_nextn)
    writer.add_feed_forward_length(cfg.n_ff)
    writer.add_head_count(cfg.n_head)
    writer.add_head_count_kv(cfg.n_head_kv)
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_expert_count(cfg.n_expert)
    writer.add_expert_used_count(cfg.n_expert_used)
    writer.add_expert_shared_count(1)
    writer.add_expert_feed_forward_length(cfg.n_ff_exp)
    writer.add_leading_dense_block_count(1)
    writer.add_expert_weights_scale(1.0)
    writer.add_expert_weights_norm(True)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_vocabulary(writer, cfg.n_vocab)
    trunk = tuple(f"blk.{i}." for i in range(cfg.n_trunk))
    tensors = {name: array for name, array in weights(cfg).items() if not (mtp_only and name.startswith(trunk))}
    return finish(writer, path, tensors)
