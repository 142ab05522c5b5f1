"""llama-server's flags beyond the basic ones, with their meaning: the KV cache and attention, chat
templates and reasoning, CORS, slot files, tags, several listening addresses, and the
``LLAMA_ARG_*`` environment variables. Flags of features we do not have are start-up errors that
name them (``REFUSED``), never silently ignored; flags whose behaviour is always ours are accepted
(``ALWAYS``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from llama_ffi import backends

# flag -> why it cannot be honoured here
REFUSED = {
    "--grp-attn-n": "self-extend (group attention) is not supported",
    "--grp-attn-w": "self-extend (group attention) is not supported",
    "--model-url": "models are not downloaded from URLs: download the file and pass -m",
    "--hf-repo-draft": "pass the draft model's file with -md",
    "--mmproj-url": "pass the projector's file with --mmproj",
    "--spec-synth-len": "synthetic drafts are not supported",
    "--spec-synth-rates": "synthetic drafts are not supported",
    "--timeout": "a read/write timeout is not supported yet",
    "--context-shift": "context shift is not supported: a request that fills its slot ends with finish_reason length",
}
VALUED_REFUSED = {"--context-shift"}

# flags for what this server always does (llama-server's defaults or a no-op here)
ALWAYS = {
    "--cont-batching": "requests are always batched together",
    "--no-ui": "no web UI is served",
    "--offline": "-hf reads its cache first and downloads nothing when the file is there",
    "--no-cache-idle-slots": "idle slots keep their cache in their cells only (the RAM cache is --cache-ram)",
    "--backend_sampling": "sampling runs in llama.cpp's sampler chain on the CPU (the same distribution)",
    "--jinja": "chat templates are always rendered with Jinja (in a sandbox)",
}

# llama.cpp's environment variables for flags (common/arg.cpp's set_env); the flag wins over them
ENVIRONMENT = {
    "LLAMA_ARG_THREADS": "--threads",
    "LLAMA_ARG_CTX_SIZE": "--ctx-size",
    "LLAMA_ARG_N_PREDICT": "--n-predict",
    "LLAMA_ARG_BATCH": "--batch-size",
    "LLAMA_ARG_UBATCH": "--ubatch-size",
    "LLAMA_ARG_CACHE_RAM": "--cache-ram",
    "LLAMA_ARG_KV_UNIFIED": "--kv-unified",
    "LLAMA_ARG_FLASH_ATTN": "--flash-attn",
    "LLAMA_ARG_POOLING": "--pooling",
    "LLAMA_ARG_CACHE_TYPE_K": "--cache-type-k",
    "LLAMA_ARG_CACHE_TYPE_V": "--cache-type-v",
    "LLAMA_ARG_N_PARALLEL": "--parallel",
    "LLAMA_ARG_MMPROJ": "--mmproj",
    "LLAMA_ARG_N_GPU_LAYERS": "--n-gpu-layers",
    "LLAMA_ARG_ALIAS": "--alias",
    "LLAMA_ARG_TAGS": "--tags",
    "LLAMA_ARG_MODEL": "--model",
    "LLAMA_ARG_MODELS_DIR": "--models-dir",
    "LLAMA_ARG_MODELS_PRESET": "--models-preset",
    "LLAMA_ARG_MODELS_MAX": "--models-max",
    "LLAMA_ARG_HF_REPO": "--hf-repo",
    "LLAMA_ARG_HOST": "--host",
    "LLAMA_ARG_PORT": "--port",
    "LLAMA_ARG_CORS_ORIGINS": "--cors-origins",
    "LLAMA_ARG_API_PREFIX": "--api-prefix",
    "LLAMA_ARG_EMBEDDINGS": "--embeddings",
    "LLAMA_ARG_RERANKING": "--reranking",
    "LLAMA_ARG_TIMEOUT": "--timeout",
    "LLAMA_ARG_ENDPOINT_METRICS": "--metrics",
    "LLAMA_ARG_SLOT_SAVE_PATH": "--slot-save-path",
    "LLAMA_ARG_JINJA": "--jinja",
    "LLAMA_ARG_REASONING": "--reasoning",
    "LLAMA_ARG_CHAT_TEMPLATE": "--chat-template",
    "LLAMA_ARG_CHAT_TEMPLATE_FILE": "--chat-template-file",
    "LLAMA_ARG_TOOLS": "--tools",
    "LLAMA_ARG_TOOLS_RUNTIME": "--tools-runtime",
    "LLAMA_ARG_MCP_SERVERS_CONFIG": "--mcp-servers-config",
    "LLAMA_ARG_MCP_SERVERS_JSON": "--mcp-servers-json",
    "LLAMA_ARG_UI_MCP_PROXY": "--ui-mcp-proxy",
    "LLAMA_ARG_AGENT": "--agent",
}
SWITCHES = {"--kv-unified", "--embeddings", "--reranking", "--metrics", "--jinja", "--ui-mcp-proxy", "--agent"}


def add_arguments(g) -> None:
    """This module's flags on the serve command's argument group."""
    g.add_argument(
        "-fa",
        "--flash-attn",
        choices=("on", "off", "auto"),
        help=f"flash attention (default auto; off on a CPU from -c {LONG_CONTEXT})",
    )
    g.add_argument("-ctk", "--cache-type-k", metavar="TYPE", help="KV cache type of K (f16, q8_0, ...)")
    g.add_argument("-ctv", "--cache-type-v", metavar="TYPE", help="KV cache type of V")
    g.add_argument(
        "-ctkd", "--cache-type-k-draft", metavar="TYPE", help="accepted: the draft's cache takes -ctk's type"
    )
    g.add_argument(
        "-ctvd", "--cache-type-v-draft", metavar="TYPE", help="accepted: the draft's cache takes -ctv's type"
    )
    g.add_argument("-kvu", "--kv-unified", action="store_true", default=None, help="one pool of cells for all slots")
    g.add_argument("--swa-full", action="store_true", default=None, help="a full-size cache for sliding-window layers")
    g.add_argument("--no-jinja", dest="jinja", action="store_false", help="accepted (see --jinja)")
    g.add_argument("--chat-template-file", metavar="FILE", help="a Jinja chat template file (replaces the model's)")
    g.add_argument(
        "--reasoning-format",
        choices=("deepseek", "auto"),
        help="reasoning goes to reasoning_content (the only format served)",
    )
    g.add_argument("-rea", "--reasoning", choices=("on", "off", "auto"), help="let the model think (template)")
    g.add_argument("--reasoning-budget", type=int, help="thinking tokens per request (-1: no limit, 0: none)")
    g.add_argument("--cache-ram", "-cram", type=int, metavar="MiB", help="a prompt cache in RAM of this size")
    g.add_argument("--tags", help="comma-separated tags of the model (in /v1/models)")
    g.add_argument("--cors-origins", help="comma-separated origins allowed by CORS (default: any)")
    g.add_argument("--api-prefix", default="", help="a path prefix for every route")
    g.add_argument("--spec-draft-n-min", type=int, help="shortest draft worth verifying")
    for flag in ALWAYS:
        if flag != "--jinja":
            g.add_argument(flag, action="store_true", help=f"accepted: {ALWAYS[flag]}")
    g.add_argument("--jinja", dest="jinja", action="store_true", help=f"accepted: {ALWAYS['--jinja']}")
    for flag in REFUSED:
        dest = "refused_" + flag.lstrip("-").replace("-", "_")
        if flag in VALUED_REFUSED:
            g.add_argument(flag, dest=dest, action="store_true", help=argparse.SUPPRESS)
        else:
            g.add_argument(flag, dest=dest, help=argparse.SUPPRESS)


def check_refused(args: argparse.Namespace) -> None:
    for flag, why in REFUSED.items():
        if getattr(args, "refused_" + flag.lstrip("-").replace("-", "_"), None):
            raise ValueError(f"{flag}: {why}")


def apply_environment(parser: argparse.ArgumentParser, environ=os.environ) -> None:
    """``LLAMA_ARG_*`` variables as the defaults of their flags (a flag given on the command line, in
    any of its spellings, wins)."""
    by_flag = {flag: action for action in parser._actions for flag in action.option_strings}
    for name, flag in ENVIRONMENT.items():
        value = environ.get(name)
        action = by_flag.get(flag)
        if value is None or action is None:
            continue
        if flag in SWITCHES:
            value = value.lower() in ("1", "true", "on", "enabled")
        elif action.type is not None:
            try:
                value = action.type(value)
            except (TypeError, ValueError):
                parser.error(f"{name}={value!r} is not a valid {flag}")
        parser.set_defaults(**{action.dest: value})


# On a CPU llama.cpp's "auto" turns flash attention on, and its one-token decode then slows as the
# cache grows: at a 7.7 k-token depth (python -m bench --long, SmolLM2, 2 cores) it decoded 28.6 t/s
# off against 18.5 on (AMD EPYC; prefill even) and 18.3 against 4.7 (Intel Xeon; prefill 0.84x).
# llama-bench -d on the AMD EPYC puts the crossing near 200 cached tokens: on is 10 % faster at
# depth 0, off 1.4x faster from 1 k (gemma-3, whose local layers see 512 tokens: even throughout).
# A context of this server's default size or more fills past that; a smaller one keeps auto.
LONG_CONTEXT = 4096


def long_context_on_cpu(args: argparse.Namespace) -> bool:
    """Whether flash attention is off by default: a generating server with a long context (0: the
    model's own) computed on the CPU, its V cache not quantized (a quantized one needs flash attention)."""
    on_cpu = not backends.has_gpu() or getattr(args, "n_gpu_layers", None) == 0
    generating = not (getattr(args, "embeddings", False) or getattr(args, "reranking", False))
    long = args.ctx_size == 0 or args.ctx_size >= LONG_CONTEXT
    return on_cpu and generating and long and args.cache_type_v in (None, "f16", "f32", "bf16")


def llama_options(args: argparse.Namespace) -> dict:
    """The Llama keyword arguments of this module's flags."""
    out: dict = {}
    if args.flash_attn is not None:
        out["flash_attn"] = {"on": True, "off": False, "auto": None}[args.flash_attn]
    elif long_context_on_cpu(args):
        out["flash_attn"] = False
    if args.cache_type_k is not None:
        out["type_k"] = args.cache_type_k
    if args.cache_type_v is not None:
        out["type_v"] = args.cache_type_v
    if args.kv_unified:
        out["kv_unified"] = True
    # llama.cpp's C default is a full-size cache for sliding-window layers; llama-server's (common's)
    # keeps the window only, and so does this server unless told. Without flash attention every
    # cached cell is attended to: gemma-3 at a 12 k depth (-fa off) decoded 26.9 t/s with the full
    # cache against llama-server's 52.7 (python -m bench --long).
    out["swa_full"] = bool(args.swa_full)
    if args.chat_template_file is not None:
        out["chat_template"] = Path(args.chat_template_file).read_text(encoding="utf-8")
    return out
