"""One-line configuration checks shared by the FACTOR kernels."""
from __future__ import annotations

import numbers
from typing import Any, Iterable


def check_choice(field: str, value: Any, allowed: Iterable[str], allow_callable=False):
    """Raises ValueError naming `field` and its allowed values when `value` is not one."""
    allowed = tuple(allowed)
    if allow_callable and callable(value):
        return
    if value not in allowed:
        extra = " or a callable" if allow_callable else ""
        raise ValueError(f"{field} must be one of {allowed}{extra}, got {value!r}")


def is_static_number(x: Any) -> bool:
    """True for a Python / NumPy scalar (checkable at trace time), False for tracers."""
    return isinstance(x, numbers.Real)


def check_range(field: str, value: Any, lo: float = None, hi: float = None,
                lo_open: bool = False):
    """Raises ValueError when a static number lies outside [lo, hi] (or (lo, hi])."""
    if not is_static_number(value):
        return
    bad_lo = lo is not None and (value <= lo if lo_open else value < lo)
    bad_hi = hi is not None and value > hi
    if bad_lo or bad_hi:
        left = "(" if lo_open else "["
        raise ValueError(f"{field} must lie in {left}{lo}, {hi}], got {value!r}")
