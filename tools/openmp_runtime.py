"""The OpenMP runtime the portable wheel ships: LLVM's (Intel's build, ``libiomp5.so``, from the
``intel-openmp`` wheel on the registry: manylinux_2_28, nothing newer than ``GLIBC_2.14``).

Zig brings no OpenMP runtime, and without one ggml runs its own thread pool, whose barrier between
graph nodes only spins: beside a busy process on every core its generation fell to a third of the
source build's (GCC's libgomp). Measured with ``python -m bench --thread-pool`` (SmolLM2 Q4_1,
AMD EPYC, 2 cores, 2 rounds, the source build's libraries run on each runtime): alone the three are
within noise (0.96-1.04x); beside a busy process, against libgomp, ggml's pool 0.32x generation and
0.84x for 8 sequences, libiomp5 2.91x and 2.37x (its waiting threads yield). Zig's clang builds
OpenMP code for it (``-fopenmp=libiomp5``: the ``__kmpc`` calls LLVM's runtime implements), and the
library goes into the wheel beside the CPU modules, found through their ``$ORIGIN`` run path.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE = "intel-openmp==2026.2.0"
LIBRARY = "libiomp5.so"


def stage(folder: Path) -> tuple[Path, Path]:
    """(``include`` folder holding ``omp.h``, ``libiomp5.so``) in ``folder``, from the registry's
    wheel (downloaded once)."""
    include, library = folder / "include", folder / "lib" / LIBRARY
    if (include / "omp.h").is_file() and library.is_file():
        return include, library
    downloads = folder / "download"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(downloads), PACKAGE],
        check=True,
    )
    (wheel,) = downloads.glob("intel_openmp-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(f"/lib/{LIBRARY}"):
                target = library
            elif name.endswith("/include/omp.h"):
                target = include / "omp.h"
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(name))
    if not (include / "omp.h").is_file() or not library.is_file():
        raise RuntimeError(f"{wheel.name} holds no omp.h or {LIBRARY}")
    return include, library


def cmake_args(include: Path, library: Path) -> list[str]:
    """ggml built with OpenMP against ``library`` (CMake's FindOpenMP told what to use, as it
    knows no runtime for Zig's clang)."""
    flags = f"-fopenmp=libiomp5 -I{include}"
    args = ["-DGGML_OPENMP=ON", f"-DOpenMP_iomp5_LIBRARY={library}"]
    for language in ("C", "CXX"):
        args += [f"-DOpenMP_{language}_FLAGS={flags}", f"-DOpenMP_{language}_LIB_NAMES=iomp5"]
    return args
