"""Build llama-ffi: materialise the pinned llama.cpp, build it with CMake, compile the cffi module.

All the work happens in ``build_ext`` so that metadata-only commands never start a native build.
The built module and the shared libraries are also placed in the source package (git-ignored),
so a source checkout imports the same build the wheel carries.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))


class BuildLlamaFFI(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import build_ffi
        from tools.native_build import build, copy_libraries, replace_file
        from tools.vendor import materialise

        tree = materialise()
        lib_dir = build(tree, jobs=self.parallel or None)
        module = build_ffi.compile_module(tree, lib_dir, Path(self.build_temp).resolve() / "cffi")
        for package_dir in {Path(self.get_ext_fullpath(ext.name)).parent, ROOT / "llama_ffi"}:
            copy_libraries(lib_dir, package_dir / "lib")
            for stale in package_dir.glob("_lib.*.so"):  # one built for one CPython would shadow abi3's
                if stale.name != module.name:
                    stale.unlink()
            for built in (module, module.with_name("_lib.pyi")):
                target = package_dir / built.name
                if target.resolve() != built.resolve():
                    replace_file(built, target)


class BuildWithStartupHook(build_py):
    """Also puts ``llama_ffi_as_llama_cpp.pth`` at the top of the wheel, where ``site`` runs it at
    interpreter start: ``LLAMA_FFI_AS_LLAMA_CPP=1`` lends llama-ffi the ``llama_cpp`` name to
    programs one cannot edit (``_llama_ffi_as_llama_cpp``)."""

    def run(self) -> None:
        super().run()
        hook = "llama_ffi_as_llama_cpp.pth"
        self.copy_file(str(ROOT / hook), str(Path(self.build_lib) / hook))


setup(
    # The module uses only CPython's stable ABI (cffi's C code defines Py_LIMITED_API): one build,
    # and one wheel tagged cp310-abi3, serves every CPython from 3.10 on (the oldest llguidance serves).
    ext_modules=[Extension("llama_ffi._lib", sources=[], py_limited_api=True)],
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
    cmdclass={"build_ext": BuildLlamaFFI, "build_py": BuildWithStartupHook},
    py_modules=["_llama_ffi_as_llama_cpp"],
    package_data={"llama_ffi": ["lib/*.so", "lib/*.dylib", "py.typed", "*.pyi"]},
)
