"""Router mode: ``llama-ffi serve`` without ``-m`` and with ``--models-dir`` or
``--models-preset`` serves every model they name from one endpoint, each loaded when a request
names it (``catalog``: the models; ``hf_cache``: those ``-hf`` keeps, downloaded and removed;
``hosts``: which are loaded; ``events``: ``/models/sse``; ``app``: the routes)."""

from llama_ffi.server.router.app import RouterOptions, create_router_app
from llama_ffi.server.router.catalog import ModelEntry, from_models_dir, from_preset
from llama_ffi.server.router.hosts import Fleet, State

__all__ = [
    "Fleet",
    "ModelEntry",
    "RouterOptions",
    "State",
    "create_router_app",
    "from_models_dir",
    "from_preset",
]
