"""llama.cpp's own programs, built from the pinned tree on this machine, as oracles."""

from __future__ import annotations

import subprocess
from pathlib import Path


def completion(
    binary: Path,
    model: Path,
    prompt: str,
    n_predict: int,
    n_ctx: int,
    flags: list[str],
    env: dict[str, str] | None = None,
) -> str:
    """The text ``llama-completion`` generates (prompt not echoed, no conversation mode)."""
    cmd = [
        str(binary),
        "-m",
        str(model),
        "-p",
        prompt,
        "-n",
        str(n_predict),
        "-c",
        str(n_ctx),
        "-no-cnv",
        "--no-display-prompt",
        "--simple-io",
        "-t",
        "2",
        "--no-warmup",
        *flags,
    ]
    out = subprocess.run(cmd, capture_output=True, timeout=300, stdin=subprocess.DEVNULL, env=env)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    return out.stdout.decode("utf-8", "replace").rstrip("\n").removesuffix(" [end of text]").rstrip("\n")
