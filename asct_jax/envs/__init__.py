"""JAX-native multi-turn text environments and their registry.

    env, params = make("rag_workflow", size="small", component_set="transfer")
    state, ts = env.reset(key, params)

`make(name, size=..., **overrides)`: `size` is one of SIZES; overrides set fields of the
environment's settings dataclass (its Params: HouseholdParams, ShopParams, ScienceParams,
RagWorkflowParams), whose `small()` / `hard()` presets the sizes are; for toy_tree they are
the ToyTree constructor arguments. `params` is that settings object (toy_tree: its tables).
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, Tuple

from asct_jax.envs._common import SIZES
from asct_jax.envs.base import (  # noqa: F401  (re-exports)
    BOS_ID, EOS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID, Environment, TimeStep,
    action_tokens_equal, match_action, vmap_reset, vmap_step)

# name -> module:Class (a class with `from_size(size, **overrides)`). Imported on request.
_REGISTRY: Dict[str, str] = {
    "rag_workflow": "asct_jax.envs.rag_workflow:RagWorkflow",
    "household": "asct_jax.envs.household:Household",
    "shop": "asct_jax.envs.shop:Shop",
    "science": "asct_jax.envs.science:Science",
    "toy_tree": "asct_jax.envs.toy_tree:ToyTree",
}
ENVS: Tuple[str, ...] = tuple(_REGISTRY)     # allowed environment names
# SIZES: allowed `size` values (re-exported from _common).


def _check_name(name: str) -> None:
    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {name!r}; allowed names: {list_envs()}")


def list_envs() -> list:
    """Registered environment names."""
    return sorted(_REGISTRY)


def make(name: str, size: str = "small", **overrides) -> Tuple[Environment, Any]:
    """Build environment `name` of preset `size` with settings overridden; (env, params).

    Raises a one-line ValueError for an unknown name, size or settings field (naming the
    allowed values).
    """
    _check_name(name)
    mod, attr = _REGISTRY[name].split(":")
    env_cls = getattr(importlib.import_module(mod), attr)
    env = env_cls.from_size(size, **overrides)
    return env, env.default_params()


def module_of(name: str):
    """The module of a registered environment (its expert_policy / random_policy)."""
    _check_name(name)
    return importlib.import_module(_REGISTRY[name].split(":")[0])


__all__ = ["make", "list_envs", "module_of", "ENVS", "SIZES", "Environment", "TimeStep",
           "PAD_ID", "EOS_ID", "UNK_ID", "BOS_ID", "SEP_ID", "SPECIAL_TOKENS", "match_action",
           "action_tokens_equal", "vmap_reset", "vmap_step"]
