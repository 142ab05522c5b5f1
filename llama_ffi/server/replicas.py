"""Replicas on Ray Serve (``pip install 'llama-ffi[ray]'``): a Serve deployment whose every replica
serves the ASGI app of ``llama-ffi serve`` with the same flags (its own ``Llama`` and engine), so
Ray's proxy is the only HTTP layer in front. ``build_app(...)`` is the application for a Serve
config or ``serve.run``; ``llama-ffi serve --ray --replicas N ...`` starts one on a local (or
``RAY_ADDRESS``) cluster. Each response names the replica that answered (``x-llama-ffi-replica``).

Requests of one ``x-session-id`` stay on one replica (``session_router``), where their prompts are
cached; with ``affinity="prefix"`` (``--affinity prefix``) an ingress deployment reads each body and
keeps the requests that share a prompt's start on one replica too (``replica_relay``)."""

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
    affinity: str = "session",
):
    """A Ray Serve application of ``llama-ffi serve`` with ``serve_flags`` (as on the command line,
    ``-m MODEL ...``): ``num_replicas`` replicas (or ``"auto"`` / ``autoscaling_config``), each
    loading its model when it starts and freeing it when Serve stops it. ``affinity``: "session"
    (Ray's proxy routes; ``x-session-id`` keeps a session on one replica) or "prefix" (an ingress
    reads the body: requests sharing a prompt's start share a replica, at one more hop each)."""
    if affinity not in ("session", "prefix"):
        raise ValueError(f"affinity must be 'session' or 'prefix', got {affinity!r}")
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    flags = [str(f) for f in serve_flags]

    def asgi_app():  # run on each replica when it starts
        from llama_ffi.server.launch import serve_app

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
    if affinity == "prefix":
        return _prefix_app(flags, options)
    replica = type("LlamaFFIReplica", (), {"__doc__": "One llama-ffi serve app on a Ray Serve replica."})
    deployment = serve.deployment(**options)(serve.ingress(asgi_app)(replica))
    return deployment.bind()


def _prefix_app(flags: list[str], options: dict):
    """The model deployment, called through handles, behind an ingress that reads bodies."""
    from ray import serve

    class LlamaFFIModel:
        """One llama-ffi serve app on a replica, answering relayed requests."""

        def __init__(self) -> None:
            from llama_ffi.server.launch import serve_app

            self.own = serve_app(flags)
            self.app = _named(self.own)

        async def relay(self, key: str | None, scope: dict, body: bytes):
            from llama_ffi.server.replica_relay import relay

            async for message in relay(self.app, scope, body):
                yield message

        def __del__(self) -> None:  # Serve stops the replica: its model goes with it
            served = getattr(getattr(self, "own", None), "state", None)
            if served is not None and served.served.llm is not None:
                served.served.llm.close()

    class LlamaFFIIngress:
        """Reads each request's body for its prefix; the model deployment answers it."""

        def __init__(self, model) -> None:
            self.model = model

        async def __call__(self, request):
            from llama_ffi.server.replica_relay import ingress_response, prefix_key

            body = await request.body()
            return ingress_response(self.model, prefix_key(list(request.scope["headers"]), body), body)

    model = serve.deployment(**options)(LlamaFFIModel)
    ingress = serve.deployment(
        name=f"{options['name']}-ingress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=10_000
    )(LlamaFFIIngress)
    return ingress.bind(model.bind())


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
        app = build_app(flags, num_replicas=count, max_ongoing_requests=args.parallel, affinity=args.affinity)
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
        elif arg == "--ray" or arg.startswith(("--replicas=", "--affinity=")):
            continue
        elif arg in ("--replicas", "--affinity"):
            skip = True
        else:
            out.append(arg)
    return out
