"""A synthetic tiny llama model (seeded random weights, written with gguf-py) and an independent
numpy forward pass of the same architecture: an exact oracle for logits and greedy tokens.

The numpy code follows the llama architecture from its definition (RMSNorm, rotary embedding on
adjacent pairs, grouped-query causal attention, SwiGLU), not from llama.cpp's code.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    n_vocab: int = 320
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx_train: int = 256
    rms_eps: float = 1e-5
    rope_base: float = 10000.0
    seed: int = 1234

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# Token layout of the tiny SPM vocabulary: control tokens, the 256 byte tokens, then words.
UNK, BOS, EOS = 0, 1, 2
FIRST_BYTE = 3
WORDS = [
    "▁the",
    "▁cat",
    "▁sat",
    "▁on",
    "▁mat",
    "▁a",
    "▁dog",
    "▁ran",
    "▁and",
    "▁is",
    "▁big",
    "▁small",
    "▁red",
    "▁blue",
    "▁hello",
    "▁world",
]


def vocabulary(cfg: TinyConfig) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types (gguf TokenType values) of the tiny vocabulary."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, CONTROL, BYTE...
    words = WORDS + [f"▁w{i}" for i in range(cfg.n_vocab - len(tokens) - len(WORDS))]
    tokens += words
    types += [1] * len(words)  # NORMAL
    scores = [0.0] * FIRST_BYTE + [0.0] * 256 + [-float(i) for i in range(len(words))]
    assert len(tokens) == cfg.n_vocab
    return tokens, scores, types


def weights(cfg: TinyConfig) -> dict[str, np.ndarray]:
    """Seeded random weights, named as in GGUF; matrices shaped (out, in) like PyTorch."""
    rng = np.random.default_rng(cfg.seed)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(cfg.n_embd)).astype(np.float32)

    kv = cfg.n_head_kv * cfg.head_dim
    w = {"token_embd.weight": (rng.standard_normal((cfg.n_vocab, cfg.n_embd))).astype(np.float32)}
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm()
        w[p + "attn_q.weight"] = mat(cfg.n_embd, cfg.n_embd)
        w[p + "attn_k.weight"] = mat(kv, cfg.n_embd)
        w[p + "attn_v.weight"] = mat(kv, cfg.n_embd)
        w[p + "attn_output.weight"] = mat(cfg.n_embd, cfg.n_embd)
        w[p + "ffn_norm.weight"] = norm()
        w[p + "ffn_gate.weight"] = mat(cfg.n_ff, cfg.n_embd)
        w[p + "ffn_up.weight"] = mat(cfg.n_ff, cfg.n_embd)
        w[p + "ffn_down.weight"] = mat(cfg.n_embd, cfg.n_ff)
    w["output_norm.weight"] = norm()
    w["output.weight"] = mat(cfg.n_vocab, cfg.n_embd) * 4.0  # spread logits: fewer near-ties
    return w


def write_gguf(path: Path, cfg: TinyConfig = TinyConfig(), chat_templates: dict[str, str] | None = None) -> Path:
    """``chat_templates``: {"default": source, NAME: source} as tokenizer.chat_template[.NAME]."""
    import gguf  # the materialised tree's gguf-py, put on sys.path by conftest

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama-oracle")
    writer.add_context_length(cfg.n_ctx_train)
    writer.add_embedding_length(cfg.n_embd)
    writer.add_block_count(cfg.n_layer)
    writer.add_feed_forward_length(cfg.n_ff)
    writer.add_head_count(cfg.n_head)
    writer.add_head_count_kv(cfg.n_head_kv)
    writer.add_layer_norm_rms_eps(cfg.rms_eps)
    writer.add_rope_freq_base(cfg.rope_base)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_vocabulary(writer, cfg.n_vocab)
    if chat_templates:
        writer.add_chat_template([{"name": k, "template": v} for k, v in chat_templates.items()])
    return finish(writer, path, weights(cfg))


def add_vocabulary(writer, n_vocab: int) -> None:
    """The tiny SPM vocabulary and its special tokens."""
    tokens, scores, types = vocabulary(TinyConfig(n_vocab=n_vocab))
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_unk_token_id(UNK)
    writer.add_add_bos_token(True)


def finish(writer, path: Path, tensors: dict[str, np.ndarray]) -> Path:
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ---- the oracle -------------------------------------------------------------------------------


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """Rotate adjacent pairs (x[2i], x[2i+1]) of each head by pos * base^(-2i/d). x: (T, H, d)."""
    d = x.shape[-1]
    inv_freq = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]  # (T, d/2)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def forward(cfg: TinyConfig, w: dict[str, np.ndarray], tokens: list[int], kv_dtype=np.float32) -> np.ndarray:
    """Logits (T, n_vocab) for every position of ``tokens``, causal, positions 0..T-1.

    ``kv_dtype`` rounds keys and values as a cache of that type would store them.
    """
    T, hd = len(tokens), cfg.head_dim
    pos = np.arange(T)
    x = w["token_embd.weight"][tokens].astype(np.float64)
    group = cfg.n_head // cfg.n_head_kv
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        h = rms_norm(x, w[p + "attn_norm.weight"], cfg.rms_eps)
        q = (h @ w[p + "attn_q.weight"].T).reshape(T, cfg.n_head, hd)
        k = (h @ w[p + "attn_k.weight"].T).reshape(T, cfg.n_head_kv, hd)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, cfg.n_head_kv, hd)
        q, k = rope(q, pos, cfg.rope_base), rope(k, pos, cfg.rope_base)
        k = k.astype(kv_dtype).astype(np.float64)
        v = v.astype(kv_dtype).astype(np.float64)
        heads = []
        for hi in range(cfg.n_head):
            kh, vh = k[:, hi // group], v[:, hi // group]
            scores = q[:, hi] @ kh.T / np.sqrt(hd) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            heads.append((scores / scores.sum(axis=-1, keepdims=True)) @ vh)
        x = x + np.concatenate(heads, axis=-1) @ w[p + "attn_output.weight"].T
        h = rms_norm(x, w[p + "ffn_norm.weight"], cfg.rms_eps)
        gate = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        x = x + ((gate / (1.0 + np.exp(-gate))) * up) @ w[p + "ffn_down.weight"].T
    x = rms_norm(x, w["output_norm.weight"], cfg.rms_eps)
    return x @ w["output.weight"].T


def greedy(cfg: TinyConfig, w: dict[str, np.ndarray], prompt: list[int], n: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(np.argmax(forward(cfg, w, tokens)[-1])))
    return tokens[len(prompt) :]
