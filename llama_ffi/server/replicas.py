"""Replicas on Ray Serve (``pip install 'llama-ffi[ray]'``): a Serve deployment whose every replica
serves the ASGI app of ``llama-ffi serve`` with the same flags (its own ``Llama`` and engine), so
Ray's proxy is the only HTTP layer in front. ``build_app(...)`` is the application for a Serve
config or ``serve.run``; ``llama-ffi serve --ray --replicas N ...`` starts one on a local (or
``RAY_ADDRESS``) cluster. Each response names the replica that answered (``x-llama-ffi-replica``).

Requests of one ``x-session-id`` stay on one replica (``session_router``), where their prompts are
cached."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence

REPLICA_HEADER = b"x-llama-ffi-replica"


def build_app(
    serve_flags: Sequence[str],
    num_replicas: int | str = 1,
    autoscaling_config: dict | None = None,
    ray_actor_options: dict | None = None,
    max_ongoing_requests: int | None = None,
    name: str = "llama-ffi",
):
    """A Ray Serve application of ``llama-ffi serve`` with ``serve_flags`` (as on the command line,
    ``-m MODEL ...``): ``num_replicas`` replicas (or ``"auto"`` / ``autoscaling_config``), each
    loading its model when it starts and freeing it when Serve stops it."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    flags = [str(f) for f in serve_flags]

    def asgi_app():  # run on each replica when it starts
        from llama_ffi.cli import serve_app

        return _named(serve_app(flags))

    options: dict = {
        "name": name,
        "ray_actor_options": ray_actor_options or {"num_cpus": 1},
        # by import path: Ray imports it in its proxy (a module of its own, as it imports Ray)
        "request_router_config": RequestRouterConfig(
            request_router_class="llama_ffi.server.session_router.SessionAffinityRouter"
        ),
    }
    if autoscaling_config is not None:
        options["autoscaling_config"] = autoscaling_config
    else:
        options["num_replicas"] = num_replicas
    if max_ongoing_requests is not None:
        options["max_ongoing_requests"] = max_ongoing_requests
    replica = type("LlamaFFIReplica", (), {"__doc__": "One llama-ffi serve app on a Ray Serve replica."})
    deployment = serve.deployment(**options)(serve.ingress(asgi_app)(replica))
    return deployment.bind()


def _named(app):
    """``app`` with each response naming this replica (Ray's replica id)."""
    from ray import serve

    replica_id = serve.get_replica_context().replica_id.unique_id.encode()

    async def named(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)

        async def send_named(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (REPLICA_HEADER, replica_id)]}
            await send(message)

        await app(scope, receive, send_named)

    return named


def run(args) -> int:
    """``llama-ffi serve --ray``: the replicas on the cluster ``RAY_ADDRESS`` names (or a local one
    started here), Serve's proxy on ``--host``/``--port``, until SIGTERM or Ctrl-C."""
    import ray
    from ray import serve

    flags = without_ray_flags(args.argv)
    count = args.replicas if args.replicas == "auto" else int(args.replicas)
    if count != "auto" and count < 1:
        raise ValueError(f"--replicas must be >= 1 or auto, got {args.replicas}")
    ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # an ignored Ctrl-C stays ignored
            signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        # A replica takes as many requests as it has slots (-np): Ray's router holds the others for
        # whichever replica frees a slot first, rather than queueing them behind a busy one.
        app = build_app(flags, num_replicas=count, max_ongoing_requests=args.parallel)
        serve.run(app, name="llama-ffi", route_prefix="/")
        print(f"llama-ffi: {count} replicas serving on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
        stop.wait()
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


def without_ray_flags(argv: Sequence[str]) -> list[str]:
    """The serve flags each replica gets: these, less ``--ray`` and ``--replicas N``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--ray" or arg.startswith("--replicas="):
            continue
        elif arg == "--replicas":
            skip = True
        else:
            out.append(arg)
    return out
