"""The benchmark's multimodal table: one image and a short question through a projector: the
image's encode time next to llama-mtmd-cli's on the same files (pairwise), and llama-ffi's prompt
evaluation speed (positions, media included, over a request's wall time less one encode;
llama-mtmd-cli prints no prompt timing at this pin). Both render the model's own template
(``--jinja``). Any mmproj works; tests/tiny_mmproj.py and tests/tiny_qwen.py write synthetic ones."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from bench.common import median

QUESTION = "Describe."
_ENCODE = re.compile(r"batch encoding done in (\d+) ms")


def native(cli: Path, model: str, mmproj: str, image: str, threads: int) -> tuple[float, float]:
    """(encode ms, nan) of llama-mtmd-cli: at this pin it reports the encode time only."""
    cmd = [
        str(cli),
        "-m",
        model,
        "--mmproj",
        mmproj,
        "--image",
        image,
        "-p",
        QUESTION,
        "-n",
        "1",
        "--temp",
        "0",
        "-t",
        str(threads),
        "--no-warmup",
        "--jinja",
    ]
    err = subprocess.run(cmd, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL).stderr
    encode = _ENCODE.search(err)
    if encode is None:
        raise RuntimeError(f"llama-mtmd-cli printed no encode time: {err[-500:]}")
    return float(encode.group(1)), float("nan")


def ours(llm, image: str) -> tuple[float, float]:
    """(encode ms, prompt positions per second) of one request about ``image``, rendered by the
    model's own template as llama-mtmd-cli --jinja renders it."""
    from llama_ffi import lib
    from llama_ffi.high.chat.completion import plan_chat

    messages = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": QUESTION}],
        }
    ]
    prompt = plan_chat(llm, messages).tokens
    media = next(p for p in prompt.pieces if p.media_id is not None)
    t0 = time.perf_counter()
    lib.mtmd_encode_chunk(llm.mtmd.ptr, media.chunk)  # the encoder alone, as mtmd-cli reports it
    encode_ms = (time.perf_counter() - t0) * 1e3
    llm.reset()  # nothing cached: the request encodes the image again and decodes every position
    t0 = time.perf_counter()
    llm.create_chat_completion(messages, max_tokens=1, temperature=0)
    decode_s = time.perf_counter() - t0 - encode_ms / 1e3
    return encode_ms, len(prompt) / decode_s


def bench(model: str, mmproj: str, image: str, threads: int, repeats: int, cli: Path | None) -> list[dict]:
    from llama_ffi.high import Llama

    runs = {"ffi": [], "native": []}
    with Llama(model, mmproj_path=mmproj, n_ctx=4096, n_threads=threads, progress=False) as llm:
        ours(llm, image)  # warm-up
        for _ in range(repeats):
            if cli:
                runs["native"].append(native(cli, model, mmproj, image, threads))
            runs["ffi"].append(ours(llm, image))
    rows = []
    for name, key in (("llama-mtmd-cli", "native"), ("llama-ffi", "ffi")):
        if runs[key]:
            rows.append(
                {
                    "name": name,
                    "encode_ms": median([r[0] for r in runs[key]]),
                    "prompt_tps": median([r[1] for r in runs[key]]),
                }
            )
    if runs["native"]:  # native encode time over ours: above 1 is faster than llama-mtmd-cli
        rows[-1]["ratio"] = median([n[0] / f[0] for f, n in zip(runs["ffi"], runs["native"])])
    return rows


def mtmd_table(rows: list[dict]) -> str:
    out = [
        "| implementation | image encode ms | prompt t/s (media included) | encode speed vs native |",
        "|---|---:|---:|---:|",
    ]
    out += [
        f"| {r['name']} | {r['encode_ms']:.1f} | {r['prompt_tps']:.1f} | {r.get('ratio', float('nan')):.3f} |"
        for r in rows
    ]
    return "\n".join(out)
