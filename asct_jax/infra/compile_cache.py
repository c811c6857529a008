"""JAX's persistent compilation cache for every entry point, and its hit / miss counts.

    compile_cache.enable("~/.cache/asct_jax/jax")   # "" leaves it off
    ...
    compile_cache.counts()  # {"hits": 3, "misses": 1, "saved_s": 41.2}

A program compiled once (same computation, shapes, devices, flags) is read back from the
directory by any later process instead of being compiled again. Tracing and lowering
still run each time a new jitted function is first called; only XLA's compile is saved.
"""
from __future__ import annotations

import collections
import os
from typing import Dict

import jax

DEFAULT_DIR = os.path.join("~", ".cache", "asct_jax", "jax")
_EVENTS = {"/jax/compilation_cache/cache_hits": "hits",
           "/jax/compilation_cache/cache_misses": "misses"}
_SAVED = "/jax/compilation_cache/compile_time_saved_sec"
_counts: collections.Counter = collections.Counter()
_listening = False


def _on_event(event: str, **kwargs) -> None:
    if event in _EVENTS:
        _counts[_EVENTS[event]] += 1


def _on_duration(event: str, duration: float, **kwargs) -> None:
    if event == _SAVED:
        _counts["saved_s"] += duration


def enable(directory: str = DEFAULT_DIR) -> bool:
    """Turns the persistent cache on in `directory` (every program, however small or
    fast to compile); an empty `directory` leaves it off. Returns whether it is on."""
    global _listening
    if not directory:
        return False
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if not _listening:
        jax.monitoring.register_event_listener(_on_event)
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _listening = True
    return True


def counts() -> Dict[str, float]:
    """Cache hits and misses of this process so far, and the compile seconds saved."""
    return {"hits": _counts["hits"], "misses": _counts["misses"],
            "saved_s": round(float(_counts["saved_s"]), 3)}
