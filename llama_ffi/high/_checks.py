"""Parameter checks that run before any value reaches C (llama.cpp aborts on some bad values)."""

from __future__ import annotations

import math

from llama_ffi.high.errors import RequestTypeError, RequestValueError


def integer(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestTypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise RequestValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise RequestValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def number(name: str, value, minimum: float | None = None, maximum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestTypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise RequestValueError(f"{name} must not be NaN")
    if minimum is not None and value < minimum:
        raise RequestValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise RequestValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise RequestTypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value
