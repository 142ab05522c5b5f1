#!/usr/bin/env python3
"""``LLAMA_SERVER_BIN_PATH`` for llama.cpp's server tests: starts ``llama-ffi serve`` (or the server
named by ``LLAMA_FFI_SHIM_TARGET``) with the tests' flags unchanged, except the model-selection flags
(``-hf``/``--hf-repo``, ``-hff``/``--hf-file``, ``--model-url``), which name a Hugging Face model the
tests would download: they become the local stand-in ``LLAMA_FFI_STANDINS`` (JSON: repo or
"repo/file" → [model path, projector path or null]; "*" for any other) gives for it."""

from __future__ import annotations

import json
import os
import sys

MODEL_FLAGS = {"-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-mu", "--model-url"}
OWN_MODELS = {"-m", "--model", "--models-dir", "--models-preset"}


def translate(argv: list[str], standins: dict) -> list[str]:
    out, repo, file = [], None, None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in MODEL_FLAGS and i + 1 < len(argv):
            value = argv[i + 1]
            if arg in ("-hff", "--hf-file"):
                file = value
            else:
                repo = value
            i += 2
            continue
        out.append(arg)
        i += 1
    if repo is not None:
        key = f"{repo}/{file}" if file else repo
        model, mmproj = standins.get(key) or standins.get(repo) or standins["*"]
        out += ["-m", model] + (["--mmproj", mmproj] if mmproj else [])
    elif standins.get("router") and not OWN_MODELS & set(out):
        out += ["--models-preset", preset(standins["router"])]
    return out


def preset(models: dict) -> str:
    """An INI preset of ``models`` (id -> path), written beside the tests' model cache."""
    path = os.path.join(os.environ.get("LLAMA_CACHE") or os.getcwd(), "standins.ini")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"[{model_id}]\nmodel = {model}\n\n" for model_id, model in models.items())
    return path


def main() -> None:
    standins = json.loads(os.environ.get("LLAMA_FFI_STANDINS", "{}"))
    args = translate(sys.argv[1:], standins)
    target = os.environ.get("LLAMA_FFI_SHIM_TARGET", "llama-ffi")
    command = [sys.executable, "-m", "llama_ffi.server"] if target == "llama-ffi" else [target]
    os.execvp(command[0], command + args)


if __name__ == "__main__":
    main()
