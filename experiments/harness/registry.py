"""The one registry of credit methods: every `Method` record, by name.

Filled by explicit imports of the packages that define methods, from the bottom of the
dependency chain up (asct_jax.rl -> asct_jax.search -> factor_jax); no other list of
method names exists. A new method is a `Method` in its module's METHODS tuple.
"""
from __future__ import annotations

from typing import Dict, Tuple

from asct_jax.infra.checks import ConfigError
from asct_jax.rl import methods as rl_methods
from asct_jax.rl.credit import Method
from asct_jax.rl.run_config import RunConfig, run_config
from asct_jax.search import methods as search_methods
from factor_jax import asct_factor, baselines
from factor_jax import methods as factor_methods

METHODS: Dict[str, Method] = {}
for _method in (*rl_methods.METHODS, *search_methods.METHODS, *factor_methods.METHODS,
                *baselines.METHODS, *asct_factor.METHODS):
    if _method.name in METHODS:
        raise ValueError(f"credit method {_method.name!r} is defined twice")
    METHODS[_method.name] = _method


def names() -> Tuple[str, ...]:
    """Every method name, in registry order (the allowed values of config.method)."""
    return tuple(METHODS)


def get(name: str) -> Method:
    """The `Method` called `name`; a one-line ConfigError naming the allowed values."""
    if name not in METHODS:
        raise ConfigError("method", f"unknown credit method {name!r}", ", ".join(METHODS))
    return METHODS[name]


def check(config) -> Tuple[Method, RunConfig]:
    """(method, the run's typed config) of a ConfigDict: config.method's Method and every
    section typed and checked, the method's own config included (RunConfig.method_config):
    the experiment edge's validation of what the run will read. A bad value is a one-line
    ConfigError naming the field and the allowed values (exit 2 from a script)."""
    from asct_jax.infra.checks import check as check_value
    from factor_jax.hindsight.warm_start import HINDSIGHT

    method = get(config.method)
    run = run_config(config, method)
    # A substrate field whose values a method package owns (factor_jax.hindsight).
    check_value("warm_start.phase", run.warm_start.phase, HINDSIGHT)
    return method, run
