"""A C and C++ compiler whose output runs on an older glibc: Zig's clang (the ``ziglang`` package).

Binaries built against this machine's glibc need its newest symbol versions (``exp@GLIBC_2.29``,
``dladdr@GLIBC_2.34``...), so a wheel built with the system compiler is tagged with this
machine's glibc. ``zig cc -target x86_64-linux-gnu.2.28`` links against stubs of glibc 2.28
instead and links its own libc++ statically, so the libraries need nothing newer than 2.28 and no
``libstdc++``. It is a pip package: no container, no sysroot, no root (a manylinux image would
need a container runtime this build does not assume).

Zig brings no OpenMP runtime: the wheel's comes from ``tools.openmp_runtime``.

CMake and distutils take one executable per compiler, so each is a small script calling
``zig cc`` / ``zig c++`` with the target; ``CC`` and ``CXX`` name them for cffi's compile of the
module, ``cmake_args`` for llama.cpp's build.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

DEFAULT_GLIBC = "2.28"


def zig_executable() -> Path:
    try:
        import ziglang
    except ImportError:
        raise RuntimeError("the older-glibc build needs Zig: pip install ziglang") from None
    return Path(ziglang.__file__).resolve().parent / "zig"


def target(glibc: str, machine: str = "x86_64") -> str:
    return f"{machine}-linux-gnu.{glibc}"


def write_wrappers(folder: Path, glibc: str = DEFAULT_GLIBC) -> dict[str, Path]:
    """``cc`` and ``c++`` scripts in ``folder`` that compile for ``glibc``; rewritten only when
    they change (CMake reconfigures when its compiler's file changes)."""
    folder.mkdir(parents=True, exist_ok=True)
    zig = zig_executable()
    out = {}
    for name, mode in (("cc", "cc"), ("c++", "c++")):
        script = folder / f"zig-{name}"
        # ZIG_GLOBAL_CACHE_DIR stays the user's: zig builds libc++ and the glibc stubs once there.
        text = f'#!/bin/sh\nexec "{zig}" {mode} -target {target(glibc)} "$@"\n'
        if not script.is_file() or script.read_text() != text:
            script.write_text(text)
            script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        out[name] = script
    return out


# Zig's linker writes no GNU build ID unless asked (the import guard identifies libllama by it, as
# auditwheel rewrites the run paths); its static libc++ brings debug sections (5x the size); and it
# writes DT_RUNPATH, which LD_LIBRARY_PATH overrides: DT_RPATH keeps the wheel on its own libraries.
# Nor does it link the start files whose destructor calls __cxa_finalize, so a library unloaded
# with dlclose leaves its C++ static destructors registered, and the process crashes at exit (the
# Vulkan module, when the loader finds no driver, registers some and ggml unloads it): -z nodelete
# keeps every library mapped once loaded.
LINK_FLAGS = "-Wl,--build-id=sha1 -Wl,--strip-debug -Wl,--disable-new-dtags -Wl,-z,nodelete"


def cmake_args(wrappers: dict[str, Path]) -> list[str]:
    return [
        f"-DCMAKE_C_COMPILER={wrappers['cc']}",
        f"-DCMAKE_CXX_COMPILER={wrappers['c++']}",
        f"-DCMAKE_SHARED_LINKER_FLAGS={LINK_FLAGS}",
        f"-DCMAKE_MODULE_LINKER_FLAGS={LINK_FLAGS}",  # the backend modules
    ]


def compiler_env(wrappers: dict[str, Path]) -> dict[str, str]:
    """What distutils (cffi's compile) reads: the compiler, and the linker built from it."""
    cc = str(wrappers["cc"])
    return {"CC": cc, "CXX": str(wrappers["c++"]), "LDSHARED": f"{cc} -shared {LINK_FLAGS}"}


if __name__ == "__main__":  # print the wrappers' folder after writing them (for a manual build)
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.getcwd()) / "build" / "zig"
    for path in write_wrappers(where, sys.argv[2] if len(sys.argv) > 2 else DEFAULT_GLIBC).values():
        print(path)
