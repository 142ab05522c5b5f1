"""``llama-ffi serve``'s flags (llama-server's) and the app they make: one model's, or router mode's
(``create``); ``serve_app`` builds it from a flag list (each Ray Serve replica does). Running it
(sockets, signals, uvicorn) is ``server.cli``'s."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable

from llama_ffi.high.request_fields import MAX_TOKENS
from llama_ffi.server import agent, flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The serve command's own flags (the model's come from the common ones)."""
    g = parser.add_argument_group("server (llama-server's flags)")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    g.add_argument("--port", type=int, default=8080)
    g.add_argument(
        "-np",
        "--parallel",
        type=int,
        default=None,
        help="slots: sequences decoded together (default 8, at most n_batch)",
    )
    g.add_argument(*MAX_TOKENS.flags, type=int, default=None, help=f"{MAX_TOKENS.help} (a request may say)")
    g.add_argument("-b", "--batch-size", type=int, default=None, help="logical batch size (n_batch)")
    g.add_argument("-ub", "--ubatch-size", type=int, default=None, help="physical batch size (n_ubatch)")
    g.add_argument("-a", "--alias", help="the model's id in /v1/models and in results (default: its file name)")
    g.add_argument("--api-key", action="append", default=[], help="an API key (repeatable)")
    g.add_argument("--api-key-file", help="a file of API keys, one per line")
    g.add_argument(
        "--embeddings",
        "--embedding",
        action="store_true",
        help="serve /v1/embeddings (an embedding model) instead of completions",
    )
    g.add_argument("--reranking", "--rerank", action="store_true", help="serve /v1/rerank (a reranking model)")
    g.add_argument("--pooling", choices=("none", "mean", "cls", "last", "rank"), help="embedding pooling")
    g.add_argument(
        "--override-kv",
        action="append",
        default=[],
        type=_override,
        metavar="KEY=TYPE:VALUE",
        help="override model metadata (TYPE: int, float, bool, str), e.g. "
        "tokenizer.ggml.fim_pre_token_id=int:8 (repeatable)",
    )
    g.add_argument(
        "--chat-template",
        metavar="NAME|TEMPLATE",
        help="a built-in chat template of llama.cpp's, or a Jinja template",
    )
    g.add_argument("--no-metrics", dest="metrics", action="store_false", help="no GET /metrics (the default)")
    g.add_argument("--metrics", dest="metrics", action="store_true", help="GET /metrics (Prometheus)")
    g.add_argument("--no-slots", dest="slots", action="store_false", help="no GET /slots")
    g.add_argument("--slots", dest="slots", action="store_true", help="GET /slots (the default)")
    g.add_argument(
        "--slot-save-path",
        metavar="DIR",
        type=directory,
        help="POST /slots/ID?action=save|restore|erase: slot caches saved as files in DIR (names only)",
    )
    g.add_argument(
        "--queue-size",
        type=int,
        default=64,
        help="requests that may wait for a slot; past them, 503 with Retry-After (default 64)",
    )
    g.add_argument(
        "--media-path",
        metavar="DIR",
        help="allow image files under DIR in messages (file:// or a relative path); otherwise only data: URIs",
    )
    g.add_argument(
        "--timeout-graceful-shutdown",
        type=float,
        default=None,
        metavar="SECONDS",
        help="on SIGTERM, wait at most this long for requests in flight (default: until they end)",
    )
    flags.add_arguments(g)
    agent.add_arguments(parser)
    r = parser.add_argument_group("router mode (no -m: every model of --models-dir / --models-preset)")
    r.add_argument(
        "--models-dir", metavar="DIR", help="serve every GGUF of DIR (a subdirectory: a model and its mmproj)"
    )
    r.add_argument("--models-preset", metavar="FILE", help="an INI file of models, each with its own flags ([*]: all)")
    r.add_argument("--models-max", type=int, default=4, help="models loaded at once (0: no limit; default 4)")
    r.add_argument(
        "--no-models-autoload",
        dest="models_autoload",
        action="store_false",
        help="load a model only on POST /models/load (default: when a request names it)",
    )
    ray = parser.add_argument_group("replicas on Ray Serve (pip install 'llama-ffi[ray]')")
    ray.add_argument("--ray", action="store_true", help="serve replicas of this server on a Ray cluster (RAY_ADDRESS)")
    ray.add_argument("--replicas", default="1", help="how many (a number, or auto: Serve's autoscaling)")
    ray.add_argument(
        "--affinity",
        choices=("session", "prefix"),
        default="session",
        help="which requests share a replica: one x-session-id's (default), or also those sharing a "
        "prompt's start (an ingress reads each body: one more hop)",
    )
    g.add_argument(
        "--sleep-idle-seconds",
        type=float,
        default=None,
        metavar="SECONDS",
        help="free the model after this long without requests; the next request loads it again",
    )
    parser.set_defaults(metrics=False, slots=True, serve_parser=parser)


def _override(text: str) -> tuple[str, bool | int | float | str]:
    """llama.cpp's ``--override-kv KEY=TYPE:VALUE``."""
    key, _, typed = text.partition("=")
    kind, _, value = typed.partition(":")
    try:
        parse = {"int": int, "float": float, "str": str, "bool": {"true": True, "false": False}.__getitem__}[kind]
        return key, parse(value)
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(
            f"expected KEY=TYPE:VALUE with TYPE int, float, bool or str, got {text!r}"
        ) from None


def api_keys(args: argparse.Namespace) -> list[str]:
    keys = list(args.api_key)
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as f:
            keys += [line.strip() for line in f if line.strip()]
    return keys


def llama_options(args: argparse.Namespace) -> dict:
    """The Llama's keyword arguments that these flags decide."""
    from llama_ffi import lib

    flags.check_refused(args)
    out: dict = {
        "n_batch": args.batch_size,
        "n_ubatch": args.ubatch_size,
        "kv_overrides": dict(args.override_kv) or None,
    }
    if args.parallel is not None:
        if args.parallel < 1:
            raise ValueError(f"--parallel must be >= 1, got {args.parallel}")
        # llama-server's slots: n_ctx / parallel cells each, unless --kv-unified shares one pool
        out.update(n_seq_max=args.parallel, kv_unified=bool(args.kv_unified))
    if args.chat_template is not None:
        from llama_ffi.high.chat.formats import ALIASES, builtin_formats

        if "{{" in args.chat_template or "{%" in args.chat_template:
            out["chat_template"] = args.chat_template  # a Jinja template
        elif ALIASES.get(args.chat_template, args.chat_template) in builtin_formats():
            out["chat_format"] = args.chat_template
        else:
            raise ValueError(
                f"--chat-template {args.chat_template!r} is neither a Jinja template nor one of llama.cpp's "
                f"built-in templates: {', '.join(builtin_formats())}"
            )
    out.update(flags.llama_options(args))
    if args.embeddings or args.reranking:
        out["embeddings"] = True
        pooling = "rank" if args.reranking else args.pooling
        if pooling is not None:
            out["pooling_type"] = getattr(lib, f"LLAMA_POOLING_TYPE_{pooling.upper()}")
    return out


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``serve``'s own flags on a parser that has the model flags (``model_flags.common_parser``)."""
    add_arguments(parser)
    flags.apply_environment(parser)  # llama-server's LLAMA_ARG_* variables
    parser.set_defaults(ctx_size=4096)


def directory(value: str) -> str:
    """A flag's directory, which must exist (llama-server refuses to start otherwise too)."""
    if not os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"not a directory: {value}")
    return value


def serve_app(serve_flags: list[str]):
    """The ASGI app of ``llama-ffi serve FLAGS``, its model loaded (each Ray Serve replica builds
    its own with it)."""
    from llama_ffi import model_flags

    parser = argparse.ArgumentParser(prog="llama-ffi serve", parents=[model_flags.common_parser()])
    configure_parser(parser)
    args = parser.parse_args(list(serve_flags))
    args.argv = list(serve_flags)
    return create(args, model_flags.serving, load_now=True)


def create(args: argparse.Namespace, serving, failed: Callable[[], None] | None = None, load_now: bool = False):
    """The app these flags make: router mode's, or one model's (loaded at once with ``load_now``,
    else in a thread while /health says 503)."""
    from llama_ffi.server.api import create_app

    helper = agent.from_flags(args)
    if helper.localhost_only and not args.cors_origins:
        args.cors_origins = "localhost"  # tools reach this machine: no other site's page may call them
    if router_mode(args):
        return _router_app(args, serving, api_keys(args), helper)
    load, options = prepare(args, *serving(args), failed)
    return create_app(load, options, load_now=load_now, owns_llm=True, agent=helper)


def router_mode(args: argparse.Namespace) -> bool:
    return args.model is None and args.hf_repo is None and bool(args.models_dir or args.models_preset)


def prepare(
    args: argparse.Namespace,
    open_llama: Callable[..., object],
    lora_names: Callable[[object], list[str]],
    failed: Callable[[], None] | None = None,
):
    """The model's loader and the server's options, from the flags. ``failed()``: called when the
    model does not load."""
    from llama_ffi import sampling_flags
    from llama_ffi.server.options import ServerOptions

    options = ServerOptions(
        alias=args.alias,
        api_keys=api_keys(args),
        metrics=args.metrics,
        slots=args.slots,
        slot_save_path=args.slot_save_path,
        queue_size=args.queue_size,
        media_path=args.media_path,
        sampling=sampling_flags.from_flags(args),
        n_predict=args.n_predict,
        tags=tuple(t for t in (args.tags or "").split(",") if t),
        cors_origins=_cors_origins(args),
        api_prefix=args.api_prefix.rstrip("/"),
        reasoning=args.reasoning,
        reasoning_format=args.reasoning_format,
        reasoning_budget=args.reasoning_budget,
        verbose=args.verbose,
        sleep_idle_seconds=args.sleep_idle_seconds,
    )
    llama_kwargs = llama_options(args)

    def load():
        try:
            llm = open_llama(**llama_kwargs)
        except BaseException:
            if failed is not None:
                failed()
            raise
        options.lora_names = tuple(lora_names(llm))
        if args.cache_ram:  # MiB of prompt states kept in RAM beside the slots (llama-server's --cache-ram)
            from llama_ffi.high import LlamaRAMCache

            llm.set_cache(LlamaRAMCache(capacity_bytes=args.cache_ram << 20))
        print(f"llama-ffi: model {options.alias or llm.model_path} loaded", file=sys.stderr, flush=True)
        return llm

    return load, options


def _router_app(args: argparse.Namespace, serving, keys: list[str], helper: agent.Agent):
    """Router mode's app: each model's flags are the preset's ([*], then its section) under this
    command line's (llama-server's precedence); its app is the single-model server's."""
    from llama_ffi.server import router
    from llama_ffi.server.api import create_app
    from llama_ffi.server.router import hf_cache

    parser = args.serve_parser

    def entries() -> list[router.ModelEntry]:
        """-hf's cache, then --models-dir, then the preset: a later source's model of the same
        name wins (llama-server's precedence)."""
        found = hf_cache.entries() + (router.from_models_dir(args.models_dir) if args.models_dir else [])
        if args.models_preset:
            table = {
                flag.lstrip("-"): (flag, action.nargs == 0)
                for action in parser._actions
                for flag in action.option_strings
            }
            found += router.from_preset(args.models_preset, table, flags.ENVIRONMENT)
        return list({entry.id: entry for entry in found}.values())

    def build(entry: router.ModelEntry):
        model_args = parser.parse_args([*entry.flags, *args.argv])
        model_args.alias = entry.id  # the router names its models
        load, options = prepare(model_args, *serving(model_args))
        options = dataclasses.replace(options, api_keys=(), cors_origins=(), api_prefix="", sleep_idle_seconds=None)
        return create_app(load, options, load_now=True)

    def free(app) -> None:
        app.state.served.llm.close()

    fleet = router.Fleet(entries(), build, free, args.models_max, args.models_autoload)
    options = router.RouterOptions(
        api_keys=tuple(keys),
        cors_origins=_cors_origins(args),
        api_prefix=args.api_prefix.rstrip("/"),
        sleep_idle_seconds=args.sleep_idle_seconds,
    )
    return router.create_router_app(fleet, options, entries, helper)


def _cors_origins(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(o.strip() for o in args.cors_origins.split(",")) if args.cors_origins else ("*",)
