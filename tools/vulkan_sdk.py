"""What llama.cpp's Vulkan backend needs to build, for the wheel's Vulkan module.

The system's Vulkan development files (Debian: ``libvulkan-dev``, ``glslc``, ``spirv-headers``)
live in ``/usr/include``, beside this machine's glibc headers. A compiler that targets an older
glibc (``tools.zig_toolchain``) must not search ``/usr/include`` — it would compile against the
newer glibc's headers — so the Vulkan, video and SPIR-V headers are copied into a folder of their
own, with SPIR-V-Headers' CMake package beside them (it finds its headers relative to itself).

The module links the Vulkan loader (``libvulkan.so.1``), which stays the user's system's: where
no loader is installed, ggml cannot open the module, skips it without a word, and runs on the CPU.
"""

from __future__ import annotations

import shutil
from pathlib import Path

SYSTEM_INCLUDE = Path("/usr/include")
HEADER_FOLDERS = ("vulkan", "vk_video", "spirv")
SPIRV_CMAKE = ("/usr/share/cmake/SPIRV-Headers", "/usr/lib/x86_64-linux-gnu/cmake/SPIRV-Headers")
LOADER_LINKS = ("/usr/lib/x86_64-linux-gnu/libvulkan.so", "/usr/lib64/libvulkan.so", "/usr/lib/libvulkan.so")
MISSING = "the Vulkan module needs {what} (Debian: apt-get install glslc libvulkan-dev spirv-headers)"


def _first(paths) -> Path | None:
    return next((Path(p) for p in paths if Path(p).exists()), None)


def stage(into: Path) -> list[str]:
    """Copy the headers into ``into`` and return the CMake arguments of a Vulkan build."""
    glslc = shutil.which("glslc")
    loader = _first(LOADER_LINKS)
    spirv_cmake = _first(SPIRV_CMAKE)
    for what, found in (
        ("glslc", glslc),
        ("the Vulkan loader's link (libvulkan.so)", loader),
        ("SPIRV-Headers' CMake package", spirv_cmake),
        *((f"{SYSTEM_INCLUDE / name}/", (SYSTEM_INCLUDE / name).is_dir() or None) for name in HEADER_FOLDERS),
    ):
        if not found:
            raise RuntimeError(MISSING.format(what=what))
    include = into / "include"
    for name in HEADER_FOLDERS:
        if (include / name).exists():
            shutil.rmtree(include / name)
        shutil.copytree(SYSTEM_INCLUDE / name, include / name)
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
