"""The package's build backend: setuptools', plus llama.cpp's CMake options as config settings.

``CMAKE_ARGS`` in the environment cannot live in a requirements file or in ``pyproject.toml``; a
config setting can::

    pip install . --config-settings cmake.args="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=89"
    # requirements.txt (pip >= 23.1):
    llama-ffi @ git+https://...  --config-settings cmake.args=-DGGML_VULKAN=ON

``cmake.args`` (given once or repeated) is added after any ``CMAKE_ARGS`` of the environment, so
the setting wins where both name an option; ``cmake.build-dir`` builds in another folder (one per
GPU configuration keeps each incremental). Every other setting goes to setuptools unchanged.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401 - hooks this backend does not change
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

CMAKE_ARGS = "cmake.args"
BUILD_DIR = "cmake.build-dir"
OURS = (CMAKE_ARGS, BUILD_DIR)


def _values(setting) -> list[str]:
    return [setting] if isinstance(setting, str) else [str(v) for v in setting or ()]


def environment(config_settings: Mapping | None, base: Mapping[str, str]) -> dict[str, str]:
    """The environment variables of ``tools.native_build`` that ``config_settings`` set."""
    settings = dict(config_settings or {})
    out = {}
    args = _values(settings.get(CMAKE_ARGS))
    if args:
        out["CMAKE_ARGS"] = " ".join([base.get("CMAKE_ARGS", ""), *args]).strip()
    build_dir = _values(settings.get(BUILD_DIR))
    if build_dir:
        out["LLAMA_FFI_BUILD_DIR"] = os.path.abspath(build_dir[-1])
    return out


@contextlib.contextmanager
def _applied(config_settings: Mapping | None) -> Iterator[dict | None]:
    changes = environment(config_settings, os.environ)
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        rest = {k: v for k, v in (config_settings or {}).items() if k not in OURS}
        yield rest or None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with _applied(config_settings) as rest:
        return _setuptools.build_wheel(wheel_directory, rest, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    with _applied(config_settings) as rest:
        return _setuptools.build_editable(wheel_directory, rest, metadata_directory)
