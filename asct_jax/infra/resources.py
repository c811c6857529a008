"""What a run costs the machine beyond its wall clock."""
from __future__ import annotations

import resource

import jax


def peak_memory_gb() -> float:
    """The process's peak memory so far, GB: the first local device's peak_bytes_in_use
    where the platform reports it (GPU, TPU), else the process's max resident set (CPU;
    Linux reports ru_maxrss in KiB)."""
    stats = jax.local_devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return stats["peak_bytes_in_use"] / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
