"""Ray Serve's request router for ``llama-ffi serve --ray``, with session affinity: requests that
carry the same ``x-session-id`` header go to one replica while it has room (a rendezvous hash of the
id over the replicas; the others follow as fallback), so a conversation's next turn finds its prompt
in that replica's slot cache. Ray's HTTP proxy hands a router the request's headers but not its
body, so the client names the session; behind the prefix ingress (``replica_relay``) the key it
computed from the body comes as the call's first argument. Requests without one go to the shorter queue of two random
replicas (Ray's default policy). Imported by Ray (in its proxy), never by the default package."""

from __future__ import annotations

import hashlib
import pickle
import random

from ray.serve.request_router import FIFOMixin, RequestRouter

SESSION_HEADER = b"x-session-id"


def session_of(pending) -> bytes | None:
    """The ``x-session-id`` of a request the HTTP proxy routes (its pickled ASGI scope), if any."""
    arg = pending.args[0] if pending is not None and pending.args else None
    if isinstance(arg, str):  # a key the prefix ingress computed (replica_relay)
        return arg.encode()
    if not isinstance(arg, bytes):
        return None
    try:
        scope = pickle.loads(arg).asgi_scope  # Ray's own message from its proxy
    except Exception:  # noqa: BLE001 - not an HTTP request: no session
        return None
    return next((v for k, v in scope.get("headers", ()) if k.lower() == SESSION_HEADER), None)


class SessionAffinityRouter(FIFOMixin, RequestRouter):
    async def choose_replicas(self, candidate_replicas, pending_request=None):
        key = session_of(pending_request)
        if key is None:
            return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]

        def weight(replica) -> bytes:
            return hashlib.sha1(key + b"\0" + replica.replica_id.unique_id.encode()).digest()

        ranked = sorted(candidate_replicas, key=weight)
        return [ranked[:1], ranked[1:]]
