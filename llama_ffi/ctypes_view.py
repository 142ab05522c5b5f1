"""A ctypes view of the C API, derived from the compiled cffi module.

The cffi module's types are the generated cdefs (``headers/``) as the C compiler checked them:
every struct's fields and offsets, every function's argument and result types. This module turns
each into its ctypes counterpart (structs and unions as ``ctypes.Structure``/``Union`` with their
``_fields_``, pointers, arrays, callbacks as ``CFUNCTYPE``, enums as integers of their size), and
each function into a ctypes function of the shared library that exports it, with ``argtypes`` and
``restype`` set. Libraries written against llama-cpp-python's ctypes layer call these; no
declaration is written by hand, and ``tests/test_ctypes_view.py`` checks every struct's size and
field offsets against cffi's.

Pointers to opaque structs (``llama_model *``) are ``c_void_p``, as in llama-cpp-python: a handle
from either layer is an address the other takes (``ffi.cast("struct llama_model *", address)``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

from llama_ffi import ffi, lib

PRIMITIVES = {
    "_Bool": ctypes.c_bool,
    "char": ctypes.c_char,
    "signed char": ctypes.c_byte,
    "unsigned char": ctypes.c_ubyte,
    "short": ctypes.c_short,
    "unsigned short": ctypes.c_ushort,
    "int": ctypes.c_int,
    "unsigned int": ctypes.c_uint,
    "long": ctypes.c_long,
    "unsigned long": ctypes.c_ulong,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "long double": ctypes.c_longdouble,
    "int8_t": ctypes.c_int8,
    "uint8_t": ctypes.c_uint8,
    "int16_t": ctypes.c_int16,
    "uint16_t": ctypes.c_uint16,
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "ssize_t": ctypes.c_ssize_t,
    "intptr_t": ctypes.c_ssize_t,
    "uintptr_t": ctypes.c_size_t,
}
INTEGERS = {1: ctypes.c_int8, 2: ctypes.c_int16, 4: ctypes.c_int32, 8: ctypes.c_int64}  # enums, by size
GLUE_PREFIX = "llama_ffi_"  # the cffi module's own C helpers: not llama.cpp's API


class UnsupportedType(TypeError):
    """A C type ctypes cannot express (a function with a variable argument list)."""


def is_complete(ctype) -> bool:
    try:
        ffi.sizeof(ctype)
    except ffi.error:
        return False
    return True


class CtypesView:
    """ctypes types and functions for the cffi module's C types, made on first use and kept."""

    def __init__(self) -> None:
        self._types: dict[str, object] = {}
        self._functions: dict[str, object] = {}
        self._lock = threading.RLock()

    # ---- types -------------------------------------------------------------------------------------
    def type_of(self, ctype):
        """The ctypes type of a cffi ``CType`` (None for ``void``)."""
        with self._lock:
            key = ctype.cname
            if key not in self._types:
                self._types[key] = self._make(ctype)
            return self._types[key]

    def _make(self, ctype):
        kind = ctype.kind
        if kind == "void":
            return None
        if kind == "primitive":
            if ctype.cname not in PRIMITIVES:
                raise UnsupportedType(f"no ctypes type for {ctype.cname}")
            return PRIMITIVES[ctype.cname]
        if kind == "enum":
            return INTEGERS[ffi.sizeof(ctype)]
        if kind == "pointer":
            return self._pointer(ctype.item)
        if kind == "array":
            item = self.type_of(ctype.item)
            return item * ctype.length if ctype.length is not None else ctypes.POINTER(item)
        if kind == "function":
            return self._function_type(ctype)
        if kind in ("struct", "union"):
            return self._record(ctype)
        raise UnsupportedType(f"no ctypes type for {ctype.cname} ({kind})")

    def _pointer(self, item):
        if item.kind == "void":
            return ctypes.c_void_p
        if item.kind == "primitive" and item.cname == "char":
            return ctypes.c_char_p
        if item.kind == "function":
            return self._function_type(item)
        if item.kind in ("struct", "union") and not is_complete(item):
            return ctypes.c_void_p  # an opaque handle, as llama-cpp-python types it
        return ctypes.POINTER(self.type_of(item))

    def _function_type(self, ctype):
        if ctype.ellipsis:
            raise UnsupportedType(f"{ctype.cname} takes a variable argument list")
        return ctypes.CFUNCTYPE(self.type_of(ctype.result), *(self.type_of(a) for a in ctype.args))

    def _record(self, ctype):
        if not is_complete(ctype):
            return ctypes.c_void_p  # used only behind a pointer
        base = ctypes.Union if ctype.kind == "union" else ctypes.Structure
        record = type(ctype.cname.split(" ")[-1], (base,), {})
        self._types[ctype.cname] = record  # before the fields: a field may point back to it
        groups: list[list] = []  # cffi lists an anonymous union's members flat, at one offset
        for field_name, field in ctype.fields:
            overlaps = base is ctypes.Structure and groups and groups[-1][0][1].offset == field.offset
            if overlaps and field.bitsize < 0 and groups[-1][0][1].bitsize < 0:
                groups[-1].append((field_name, field))
            else:
                groups.append([(field_name, field)])
        fields, anonymous = [], []
        for group in groups:
            if len(group) == 1:
                fields.append(self._field(*group[0]))
                continue
            union = type(f"{record.__name__}_union_{len(anonymous)}", (ctypes.Union,), {})
            union._fields_ = [self._field(n, f) for n, f in group]
            anonymous.append(union.__name__)
            fields.append((union.__name__, union))
        if anonymous:
            record._anonymous_ = anonymous
        record._fields_ = fields
        return record

    def _field(self, name: str, field) -> tuple:
        if field.bitsize >= 0:
            return (name, self.type_of(field.type), field.bitsize)
        return (name, self.type_of(field.type))

    # ---- names, as llama-cpp-python's ctypes layer spells them -------------------------------------
    def named(self, name: str):
        """What llama-cpp-python's ``llama_cpp.llama_cpp.<name>`` is here: a C constant's value, a
        function, a struct or union (``llama_batch``), a typedef (``llama_token``), a pointer to one
        (``llama_batch_p``, ``llama_token_p``; an opaque one's ``llama_model_p`` and
        ``llama_model_p_ctypes`` are ``c_void_p``). None for a name the C API does not have."""
        value = getattr(lib, name, None) if not name.startswith(GLUE_PREFIX) else None
        if isinstance(value, int):
            return value
        if api_function_type(name) is not None:
            return self.function(name)
        ctype = c_type(name)
        if ctype is not None:
            return self.type_of(ctype)
        for suffix in ("_p_ctypes", "_p"):
            if name.endswith(suffix):
                pointed = c_type(name[: -len(suffix)])
                if pointed is not None:
                    return self._pointer(pointed)
        return None

    # ---- functions ---------------------------------------------------------------------------------
    def function(self, name: str):
        """The C function ``name`` of the loaded library that exports it, typed as the C API
        declares; None for a name no library exports (the cffi module's own glue)."""
        with self._lock:
            if name not in self._functions:
                self._functions[name] = self._bind(name)
            return self._functions[name]

    def _bind(self, name: str):
        ctype = api_function_type(name)
        if ctype is None:
            return None
        for library in loaded_libraries():
            try:
                function = getattr(library, name)
            except AttributeError:
                continue
            if ctype.ellipsis:
                raise UnsupportedType(f"{name} takes a variable argument list")
            function.argtypes = [self.type_of(a) for a in ctype.args]
            function.restype = self.type_of(ctype.result)
            return function
        return None


# llama.cpp's shared libraries by their sonames, libllama first (llama-cpp-python's ``_lib``)
SONAMES = ("libllama.so", "libmtmd.so", "libggml.so", "libggml-base.so", "libggml-cpu.so", "libggml-rpc.so")


@functools.cache
def loaded_libraries() -> tuple[ctypes.CDLL, ...]:
    """The handles of llama.cpp's libraries as this process loaded them (RTLD_NOLOAD: never a second
    copy, whichever file a CPU variant or a portable build took)."""
    handles = []
    for soname in SONAMES:
        try:
            handles.append(ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_LAZY))
        except OSError:
            continue  # not in this build (ggml-rpc), or a backend module loaded later
    return tuple(handles)


def api_function_type(name: str):
    """The cffi type of C API function ``name``; None for a constant, a global, the cffi module's
    own glue, or a name it does not declare."""
    value = getattr(lib, name, None)
    if value is None or name.startswith(GLUE_PREFIX) or isinstance(value, (int, ffi.CData)):
        return None
    ctype = ffi.typeof(value)
    return ctype if ctype.kind == "function" else None


def function_names() -> list[str]:
    """Every C function of llama.cpp's API that the cffi module declares."""
    return [name for name in dir(lib) if api_function_type(name) is not None]


def libllama() -> ctypes.CDLL:
    """libllama as the process loaded it: llama-cpp-python's ``_lib``."""
    return loaded_libraries()[0]


def c_type(name: str):
    """The cffi type a C name stands for: a typedef, or a struct, union or enum tag."""
    for spelling in (name, f"struct {name}", f"union {name}", f"enum {name}"):
        try:
            return ffi.typeof(spelling)
        except (ffi.error, TypeError, ValueError):
            continue
    return None


VIEW = CtypesView()  # one per process: ctypes types are compared by identity
