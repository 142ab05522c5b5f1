"""A synthetic tiny Mamba (recurrent state-space) model on the tiny llama vocabulary, written with
gguf-py from seeded random weights: a model whose memory cannot be cut at a position, for the
speculative verifier's checkpoint-and-restore path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from tiny_llama import add_vocabulary, finish


@dataclasses.dataclass(frozen=True)
class TinyMambaConfig:
    n_vocab: int = 320
    n_embd: int = 64
    n_layer: int = 2
    d_conv: int = 4
    d_state: int = 8
    dt_rank: int = 4
    seed: int = 99

    @property
    def d_inner(self) -> int:
        return 2 * self.n_embd  # llama.cpp's Mamba expects an expansion factor of 2


def weights(cfg: TinyMambaConfig) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(cfg.seed)
    e, d = cfg.n_embd, cfg.d_inner

    def mat(*shape: int) -> np.ndarray:  # (out, in) like PyTorch
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    w = {
        "token_embd.weight": rng.standard_normal((cfg.n_vocab, e)).astype(np.float32),
        "output_norm.weight": np.ones(e, dtype=np.float32),
        "output.weight": mat(cfg.n_vocab, e) * 4.0,
    }
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(e, dtype=np.float32)
        w[p + "ssm_in.weight"] = mat(2 * d, e)
        w[p + "ssm_conv1d.weight"] = mat(d, cfg.d_conv)
        w[p + "ssm_conv1d.bias"] = np.zeros(d, dtype=np.float32)
        w[p + "ssm_x.weight"] = mat(cfg.dt_rank + 2 * cfg.d_state, d)
        w[p + "ssm_dt.weight"] = mat(d, cfg.dt_rank)
        w[p + "ssm_dt.bias"] = np.full(d, -2.0, dtype=np.float32)
        # A = -exp(A_log) with the usual A_log = log(1..d_state): a stable, decaying state
        w[p + "ssm_a"] = -np.tile(np.arange(1, cfg.d_state + 1, dtype=np.float32), (d, 1))
        w[p + "ssm_d"] = np.ones(d, dtype=np.float32)
        w[p + "ssm_out.weight"] = mat(e, d)
    return w


def write_gguf(path: Path, cfg: TinyMambaConfig = TinyMambaConfig()) -> Path:
    import gguf  # the materialised tree's gguf-py, put on sys.path by conftest

    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_name("tiny-mamba")
    writer.add_context_length(1024)
    writer.add_embedding_length(cfg.n_embd)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_block_count(cfg.n_layer)
    writer.add_ssm_conv_kernel(cfg.d_conv)
    writer.add_ssm_inner_size(cfg.d_inner)
    writer.add_ssm_state_size(cfg.d_state)
    writer.add_ssm_time_step_rank(cfg.dt_rank)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_vocabulary(writer, cfg.n_vocab)
    return finish(writer, path, weights(cfg))
