"""What a run costs the machine beyond its wall clock."""
from __future__ import annotations

import resource

import jax


def peak_rss_bytes() -> int:
    """The process's own peak resident set, bytes: VmHWM of /proc/self/status on Linux.

    Not getrusage's ru_maxrss: after fork + exec Linux starts a child's ru_maxrss at the
    parent's peak (exec saves the old address space's high-water mark, and a forked
    address space copies the parent's), so a small child of a large pytest worker reports
    the worker's memory. Where /proc is missing (macOS), ru_maxrss (bytes there)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024   # reported in kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def peak_memory_gb() -> float:
    """The process's peak memory so far, GB: the first local device's peak_bytes_in_use
    where the platform reports it (GPU, TPU), else the process's peak resident set (CPU)."""
    stats = jax.local_devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return stats["peak_bytes_in_use"] / 1e9
    return peak_rss_bytes() / 1e9
