"""Dotted config field names ("train.steps"): `flatten` a nested dict to them and
`apply_overrides` set them on a copy of a config (experiments.harness.runner,
experiments.harness.warm_start).
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Mapping

from asct_jax.infra.checks import ConfigError


def flatten(d: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in d.items():
        key = prefix + k
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def apply_overrides(config, overrides: Mapping[str, Any]):
    """A copy of `config` with dotted fields set; an unknown field is a one-line error."""
    c = copy.deepcopy(config)
    for dotted, value in overrides.items():
        node = c
        *path, last = dotted.split(".")
        for i, p in enumerate(path + [last]):
            if not hasattr(node, "keys"):
                raise ConfigError(dotted, f"{'.'.join(path[:i])} is a value, not a section "
                                  "(override)", "no field below a value")
            if p not in node:
                what = "field" if i == len(path) else "section"
                raise ConfigError(dotted, f"unknown {what} (override)",
                                  ", ".join(sorted(node.keys())))
            if i < len(path):
                node = node[p]
        try:
            node[last] = value
        except (TypeError, ValueError) as e:   # ConfigDict's own type check
            raise ConfigError(dotted, f"{value!r} has the wrong type ({e})",
                              type(node[last]).__name__) from None
    return c


def under(key: str, prefixes) -> bool:
    """key is one of the dotted `prefixes` or a field below one ("ppo" holds "ppo.lr")."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)
