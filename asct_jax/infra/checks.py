"""The one validator of choices and numeric ranges (config files, kernels, environments).

Standard library only, so any module can import it cheaply:

    from asct_jax.infra.checks import check_choice, check_range

    check_choice("transform", transform, TRANSFORMS, allow_callable=True)
    check_range("tau", tau, lo=0.0, lo_open=True)     # skipped for traced (non-static) values

Every failure is a ConfigError (a ValueError) whose text is one line:
`<field>: <problem>; allowed: <allowed values or interval>`.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Iterable, Optional


class ConfigError(ValueError):
    """A configuration problem, rendered as `<field>: <problem>; allowed: <allowed>`."""

    def __init__(self, field: str, problem: str, allowed: str = ""):
        self.field, self.problem, self.allowed = field, problem, allowed
        text = f"{field}: {problem}" + (f"; allowed: {allowed}" if allowed else "")
        super().__init__(" ".join(text.split()))  # one line, whatever the parts hold


@dataclasses.dataclass(frozen=True)
class Range:
    """A numeric interval: lo <= x <= hi (open ends with lo_open / hi_open).

    None means unbounded on that side; integer=True also demands an int value.
    """

    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        lo = "-inf" if self.lo is None else repr(self.lo)
        hi = "inf" if self.hi is None else repr(self.hi)
        kind = "int in " if self.integer else ""
        return (f"{kind}{'(' if self.lo_open or self.lo is None else '['}{lo}, "
                f"{hi}{')' if self.hi_open or self.hi is None else ']'}")

    def problem(self, value: Any) -> Optional[str]:
        """None if `value` is inside, else what is wrong."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return f"expected a number, got {value!r}"
        if self.integer and not isinstance(value, numbers.Integral):
            return f"expected an int, got {value!r}"
        if math.isnan(value):
            return "nan is out of range"
        below = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        above = self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi)
        return f"{value!r} is out of range" if below or above else None


def is_static_number(x: Any) -> bool:
    """True for a Python / NumPy scalar (checkable at trace time), False for tracers."""
    return isinstance(x, numbers.Real)


def check(field: str, value: Any, rule: Any, allow_callable: bool = False) -> None:
    """Raises ConfigError unless `value` satisfies `rule`.

    Args:
      field: the name shown in the error.
      rule: a Range, or a collection of allowed values (tuple / list / set / dict keys);
        a tuple or list value passes a value set when every element is allowed.
      allow_callable: a callable value passes a value set too.
    """
    if isinstance(rule, Range):
        problem = rule.problem(value)
        if problem:
            raise ConfigError(field, problem, rule.describe())
        return
    if isinstance(rule, (str, bytes)) or not isinstance(rule, Iterable):
        raise TypeError(f"rule for {field!r} must be a collection of allowed values or a "
                        f"Range, got {type(rule).__name__}")
    allowed = tuple(rule)
    if allow_callable and callable(value):
        return
    items = value if isinstance(value, (tuple, list)) and value not in allowed else [value]
    for item in items:
        if item not in allowed:
            raise ConfigError(field, f"{item!r} is not allowed",
                              ", ".join(map(str, allowed)) + (" or a callable"
                                                              if allow_callable else ""))


def _bool_types() -> tuple:
    """bool, and NumPy's bool scalar once NumPy is imported (this module imports only the
    standard library)."""
    import sys
    np = sys.modules.get("numpy")
    return (bool,) if np is None else (bool, np.bool_)


def check_choice(field: str, value: Any, allowed: Iterable, allow_callable: bool = False):
    """Raises ConfigError naming `field` and the allowed values when `value` is not one.

    A single-valued field: a tuple or list passes only when it is itself an allowed value
    (`check` lets a sequence of allowed values through, for fields that hold several); a
    field whose allowed values are bools takes a bool (1 == True would pass otherwise)."""
    allowed = tuple(allowed)
    if isinstance(value, (tuple, list)) and value not in allowed:
        raise ConfigError(field, f"expected one value, got {value!r}",
                          ", ".join(map(str, allowed)))
    if allowed and all(isinstance(a, bool) for a in allowed) and not isinstance(
            value, _bool_types()):           # 1 == True: a flag takes a bool, not a number
        raise ConfigError(field, f"{value!r} is not allowed",
                          ", ".join(map(str, allowed)))
    check(field, value, allowed, allow_callable=allow_callable)


def check_range(field: str, value: Any, lo: Optional[float] = None,
                hi: Optional[float] = None, lo_open: bool = False, hi_open: bool = False,
                integer: bool = False) -> None:
    """Raises ConfigError when a static number lies outside the interval, or the value is
    None or a string; arrays (tracers) pass."""
    if is_static_number(value) or value is None or isinstance(value, (str, bytes)):
        check(field, value, Range(lo, hi, lo_open, hi_open, integer))
