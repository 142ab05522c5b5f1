"""What llama.cpp's Vulkan backend needs to build, for the wheel's Vulkan module.

The system's Vulkan development files (Debian: ``libvulkan-dev``, ``glslc``, ``spirv-headers``)
live in ``/usr/include``, beside this machine's glibc headers. A compiler that targets an older
glibc (``tools.zig_toolchain``) must not search ``/usr/include`` — it would compile against the
newer glibc's headers — so the Vulkan, video and SPIR-V headers are copied into a folder of their
own, with SPIR-V-Headers' CMake package beside them (it finds its headers relative to itself).

The pinned ggml-vulkan uses ``VK_EXT_layer_settings`` unconditionally, so the Vulkan headers must be
1.3.261 or newer (Debian 12's are 1.3.239): ``--vulkan-headers DIR`` (or ``$VULKAN_SDK/include``)
names a folder holding newer ``vulkan/`` and ``vk_video/``, e.g. Debian 13's ``libvulkan-dev``
unpacked without installing it; the loader and SPIR-V headers may stay the system's.

The module links the Vulkan loader (``libvulkan.so.1``), which stays the user's system's: where
no loader is installed, ggml cannot open the module, skips it without a word, and runs on the CPU.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

SYSTEM_INCLUDE = Path("/usr/include")
HEADER_FOLDERS = ("vulkan", "vk_video", "spirv")
SPIRV_CMAKE = ("/usr/share/cmake/SPIRV-Headers", "/usr/lib/x86_64-linux-gnu/cmake/SPIRV-Headers")
LOADER_LINKS = ("/usr/lib/x86_64-linux-gnu/libvulkan.so", "/usr/lib64/libvulkan.so", "/usr/lib/libvulkan.so")
MISSING = "the Vulkan module needs {what} (Debian: apt-get install glslc libvulkan-dev spirv-headers)"
OLDEST_HEADERS = (1, 3, 261)  # VK_EXT_layer_settings


def headers_folder(given: str | os.PathLike | None = None) -> Path:
    """Where ``vulkan/`` and ``vk_video/`` are read from: ``given``, ``$VULKAN_SDK/include``, or
    the system's."""
    if given:
        return Path(given)
    sdk = os.environ.get("VULKAN_SDK")
    return Path(sdk) / "include" if sdk else SYSTEM_INCLUDE


def header_version(folder: Path) -> tuple[int, int, int]:
    """(major, minor, patch) of the Vulkan headers in ``folder``, from ``vulkan_core.h``."""
    text = (folder / "vulkan" / "vulkan_core.h").read_text(errors="replace")
    patch = re.search(r"#define VK_HEADER_VERSION (\d+)", text)
    complete = re.search(r"#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(0, (\d+), (\d+),", text)
    if not (patch and complete):
        raise RuntimeError(f"{folder / 'vulkan' / 'vulkan_core.h'} does not say its version")
    return int(complete[1]), int(complete[2]), int(patch[1])


def _first(paths) -> Path | None:
    return next((Path(p) for p in paths if Path(p).exists()), None)


def stage(into: Path, headers: str | os.PathLike | None = None) -> list[str]:
    """Copy the headers into ``into`` and return the CMake arguments of a Vulkan build."""
    source = headers_folder(headers)
    glslc = shutil.which("glslc")
    loader = _first(LOADER_LINKS)
    spirv_cmake = _first(SPIRV_CMAKE)
    for what, found in (
        ("glslc", glslc),
        ("the Vulkan loader's link (libvulkan.so)", loader),
        ("SPIRV-Headers' CMake package", spirv_cmake),
        (f"{source / 'vulkan'}/", (source / "vulkan").is_dir() or None),
        (f"{SYSTEM_INCLUDE / 'spirv'}/", (SYSTEM_INCLUDE / "spirv").is_dir() or None),
    ):
        if not found:
            raise RuntimeError(MISSING.format(what=what))
    version = header_version(source)
    if version < OLDEST_HEADERS:
        raise RuntimeError(
            f"the Vulkan headers in {source} are {'.'.join(map(str, version))}; llama.cpp's Vulkan backend needs "
            f"{'.'.join(map(str, OLDEST_HEADERS))} or newer: pass --vulkan-headers DIR (or set VULKAN_SDK)"
        )
    include = into / "include"
    for name in HEADER_FOLDERS:
        origin = SYSTEM_INCLUDE / name if name == "spirv" else source / name
        if (include / name).exists():
            shutil.rmtree(include / name)
        if origin.is_dir():  # vk_video: only in newer header sets
            shutil.copytree(origin, include / name)
    cmake_dir = into / "share" / "cmake" / "SPIRV-Headers"  # its config resolves ../../../include
    if cmake_dir.exists():
        shutil.rmtree(cmake_dir)
    shutil.copytree(spirv_cmake, cmake_dir)
    return [
        "-DGGML_VULKAN=ON",
        f"-DVulkan_INCLUDE_DIR={include}",
        f"-DVulkan_LIBRARY={loader}",
        f"-DVulkan_GLSLC_EXECUTABLE={glslc}",
        f"-DSPIRV-Headers_DIR={cmake_dir}",
    ]
