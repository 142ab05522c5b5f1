"""Several machines: ggml's RPC backend as devices of a model, and the worker that serves it.

Client side (``Llama(..., rpc_servers=[...])``): every worker becomes one or more devices that the
model offloads layers to, as llama.cpp's ``--rpc`` does. ggml's RPC client aborts the whole
process when a worker goes away mid-request (``GGML_ABORT`` in its dispatcher thread), so each
worker is reached through a small relay in this process: it forwards the protocol unchanged while
the worker lives and, once the worker is gone, answers in its place with well-formed empty replies.
llama.cpp then returns normally (with meaningless numbers), and the model's owner raises
:class:`RpcWorkerLost` after the decode instead of the process dying.

Worker side (``llama-ffi rpc-server``): :func:`serve` runs ggml's server on local devices.

One module a job: ``protocol`` (the wire format, errors, endpoints), ``relay``, ``devices`` (a
model's), ``worker``.
"""

from llama_ffi.rpc.devices import RpcDevices
from llama_ffi.rpc.protocol import (
    CONN_CAPS_SIZE,
    CONNECT_TIMEOUT_S,
    DEFAULT_HOST,
    DEFAULT_PORT,
    PROTOCOL_MAJOR,
    U64,
    Cmd,
    RpcError,
    RpcWorkerLost,
    check_protocol,
    free_port,
    parse_servers,
    probe,
    recv_exact,
    split_endpoint,
    wait_until_serving,
)
from llama_ffi.rpc.relay import Relay, StandIn
from llama_ffi.rpc.worker import UNSAFE_HOST_WARNING, default_cache_dir, default_threads, serve, worker_devices

__all__ = [
    "CONNECT_TIMEOUT_S",
    "CONN_CAPS_SIZE",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "PROTOCOL_MAJOR",
    "UNSAFE_HOST_WARNING",
    "Cmd",
    "Relay",
    "RpcDevices",
    "RpcError",
    "RpcWorkerLost",
    "StandIn",
    "U64",
    "check_protocol",
    "default_cache_dir",
    "default_threads",
    "free_port",
    "parse_servers",
    "probe",
    "recv_exact",
    "serve",
    "split_endpoint",
    "wait_until_serving",
    "worker_devices",
]
