"""How many CPU threads a context uses when the caller does not say: one per physical core this
process may run on, which is what llama.cpp's own tools choose (common's ``cpu_get_num_math``).
The bare ``llama_context_params`` default (GGML_DEFAULT_N_THREADS, 4) oversubscribes a 2-core
machine: measured on SmolLM2 here, 48 tokens/s against 91 with 2 threads.

A count the caller gives is capped at the CPUs this process may use (``usable_threads``): ggml's
threads meet at spinning barriers every operation, so a thread beyond the CPUs waits for a time
slice at each one. Measured on 2 cores with 4 threads: ggml's own pool (the portable wheel's)
stalled for minutes per request, OpenMP's generation fell to 0.64x."""

from __future__ import annotations

import logging
import math
import os
from functools import cache
from pathlib import Path

CPU_SYSFS = Path("/sys/devices/system/cpu")
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
log = logging.getLogger("llama_ffi")


def _usable_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def _physical_cores(cpus: set[int]) -> int:
    """Cores among ``cpus``: hyperthreads of one core (its ``thread_siblings_list``) count once."""
    cores = set()
    for cpu in cpus:
        try:
            cores.add((CPU_SYSFS / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return len(cores)


def _cgroup_limit() -> int | None:
    """The container's CPU quota in whole CPUs (cgroup v2 ``cpu.max``), or None without one."""
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None


def _within_quota(n: int) -> int:
    limit = _cgroup_limit()
    return max(1, min(n, limit) if limit else n)


@cache
def default_threads() -> int:
    return _within_quota(_physical_cores(_usable_cpus()))


@cache
def usable_threads() -> int:
    """The CPUs this process may run on (its affinity, within the container's quota)."""
    return _within_quota(len(_usable_cpus()))


def capped(name: str, requested: int) -> int:
    """``requested`` threads, at most ``usable_threads()`` (logged when it is cut)."""
    usable = usable_threads()
    if requested <= usable:
        return requested
    log.warning("%s=%d is more than the %d CPUs this process may use: using %d", name, requested, usable, usable)
    return usable
