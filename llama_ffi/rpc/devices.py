"""A model's RPC devices (``Llama(..., rpc_servers=[...])``): every worker's devices through its relay,
then the local GPUs, as llama.cpp's ``--rpc`` orders them."""

from __future__ import annotations

from collections.abc import Sequence

from llama_ffi import backends, ffi, lib
from llama_ffi.rpc.protocol import CONNECT_TIMEOUT_S, RpcError, RpcWorkerLost, check_protocol, parse_servers, probe
from llama_ffi.rpc.relay import Relay


def _add_server(endpoint: bytes):
    add_server = backends.function("RPC", "ggml_backend_rpc_add_server", "ggml_backend_reg_t (*)(const char *)")
    return add_server(endpoint)


class RpcDevices:
    """The devices of ``servers``, for ``llama_model_params.devices``: every worker's devices
    first (as llama.cpp orders them, to keep network transfers few), then local GPUs."""

    def __init__(self, servers: str | Sequence[str], timeout: float = CONNECT_TIMEOUT_S) -> None:
        check_protocol()
        self.servers = parse_servers(servers)
        if lib.ggml_backend_reg_by_name(b"RPC") == ffi.NULL:
            raise RpcError("this build of llama.cpp has no RPC backend (GGML_RPC=OFF)")
        for endpoint in self.servers:
            probe(endpoint, timeout)  # ggml's client would abort the process on an unreachable one
        self.relays: list[Relay] = []
        devices = []
        try:
            for endpoint in self.servers:
                relay = Relay(endpoint, timeout)
                self.relays.append(relay)
                reg = _add_server(relay.endpoint.encode())
                self.check()
                if reg == ffi.NULL:
                    raise RpcError(f"RPC server {endpoint} offers no devices")
                devices += [lib.ggml_backend_reg_dev_get(reg, i) for i in range(lib.ggml_backend_reg_dev_count(reg))]
        except BaseException:
            self.close()
            raise
        self.devices = devices + _local_gpus()
        self.array = ffi.new("ggml_backend_dev_t[]", self.devices + [ffi.NULL])  # NULL-terminated

    def names(self) -> list[str]:
        return [ffi.string(lib.ggml_backend_dev_name(d)).decode() for d in self.devices]

    def check(self) -> None:
        """Raise :class:`RpcWorkerLost` if any worker has gone away."""
        for relay in self.relays:
            if relay.lost is not None:
                raise RpcWorkerLost(
                    f"RPC worker {relay.upstream} was lost ({relay.lost}); this model can no "
                    "longer compute: close it and load it again once the worker is back"
                )

    def close(self) -> None:
        """After the model is freed (its buffers talk to the workers until then)."""
        for relay in self.relays:
            relay.close()
        self.relays = []


def _local_gpus() -> list:
    gpus, igpus = [], []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        kind = lib.ggml_backend_dev_type(dev)
        if kind == lib.GGML_BACKEND_DEVICE_TYPE_GPU:
            gpus.append(dev)
        elif kind == lib.GGML_BACKEND_DEVICE_TYPE_IGPU:
            igpus.append(dev)
    return gpus or igpus  # an iGPU only when there is no discrete GPU, as llama.cpp chooses
