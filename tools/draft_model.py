"""A draft model for speculative decoding: the first layers of a real model, cut out with the
pinned tree's gguf-py.

It shares the vocabulary (every tokenizer field is copied), so it can draft for the full model,
and being a truncated copy of it, its guesses agree with the full model often enough to exercise
both acceptance and rejection (tests) and to measure the draft engine (benchmark).

    python -m tools.draft_model SmolLM2-135M-Instruct.Q4_1.gguf draft.gguf --layers 6
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


def _gguf():
    try:
        import gguf
    except ImportError:  # the pinned tree's own copy
        from tools.vendor import materialise

        sys.path.insert(0, str(materialise().path / "gguf-py"))
        import gguf
    return gguf


def cut_layers(src: Path, dst: Path, n_layers: int) -> Path:
    """Write ``dst``: ``src`` with only its first ``n_layers`` transformer blocks."""
    gguf = _gguf()
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch)
    block_count = gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer adds these itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = n_layers if field.name == block_count else field.contents()
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    layer = re.compile(r"blk\.(\d+)\.")
    kept = [t for t in reader.tensors if not (m := layer.match(t.name)) or int(m.group(1)) < n_layers]
    for t in kept:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in kept:
        writer.write_tensor_data(t.data)
    writer.close()
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="cut the first layers of a GGUF into a draft model")
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--layers", type=int, default=6)
    args = ap.parse_args(argv)
    print(cut_layers(args.src, args.dst, args.layers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
