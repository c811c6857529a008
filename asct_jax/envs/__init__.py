"""JAX-native multi-turn text environments and their registry.

    env, params = make("rag_workflow", size="small", component_set="transfer")
    state, ts = env.reset(key, params)

`make(name, **overrides)`: overrides set fields of the environment's config dataclass
(every env has `size` in {"small", "hard"} and `max_turns`; see each config class).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import Any, Dict, Tuple

from asct_jax.envs.base import (  # noqa: F401  (re-exports)
    BOS_ID, EOS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID, Environment, TimeStep,
    action_tokens_equal, match_action, vmap_reset, vmap_step)

# name -> (module:Class, module:ConfigClass or None). Modules are imported on request.
_REGISTRY: Dict[str, Tuple[str, Any]] = {
    "rag_workflow": ("asct_jax.envs.rag_workflow:RagWorkflow",
                     "asct_jax.envs.rag_workflow:RagWorkflowConfig"),
    "household": ("asct_jax.envs.household:Household", "asct_jax.envs.household:HouseholdConfig"),
    "shop": ("asct_jax.envs.shop:Shop", "asct_jax.envs.shop:ShopConfig"),
    "science": ("asct_jax.envs.science:Science", "asct_jax.envs.science:ScienceConfig"),
    "toy_tree": ("asct_jax.envs.toy_tree:ToyTree", None),
}
# `size` for config-less environments -> constructor arguments.
_CLASS_SIZES = {"small": {}, "hard": {"depth": 4}}


def _load(path: str):
    mod, attr = path.split(":")
    return getattr(importlib.import_module(mod), attr)


def list_envs() -> list:
    """Registered environment names."""
    return sorted(_REGISTRY)


def make(name: str, **overrides) -> Tuple[Environment, Any]:
    """Build environment `name` with config fields overridden; returns (env, params).

    For environments without a config dataclass (toy_tree), overrides are passed to the
    class constructor as keyword arguments.
    """
    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {name!r}; allowed names: {list_envs()}")
    env_path, cfg_path = _REGISTRY[name]
    env_cls = _load(env_path)
    if cfg_path is None:
        # Config-less environments (toy_tree): overrides are constructor arguments; `size`
        # is accepted for a uniform interface (small = the class defaults).
        overrides = dict(overrides)
        size = overrides.pop("size", "small")
        if size not in _CLASS_SIZES:
            raise ValueError(f"size={size!r} is not allowed; allowed values: "
                             f"{list(_CLASS_SIZES)}")
        fields = ["size"] + [p for p in inspect.signature(env_cls).parameters]
        for k in overrides:
            if k not in fields:
                raise ValueError(f"unknown field {k!r} for environment {name!r}; "
                                 f"allowed fields: {fields}")
        env = env_cls(**{**_CLASS_SIZES[size], **overrides})
    else:
        cfg_cls = _load(cfg_path)
        fields = [f.name for f in dataclasses.fields(cfg_cls)]
        for k in overrides:
            if k not in fields:
                raise ValueError(f"unknown field {k!r} for environment {name!r}; "
                                 f"allowed fields: {fields}")
        env = env_cls(cfg_cls(**overrides))
    return env, env.default_params()


def module_of(name: str):
    """The module of a registered environment (its expert_policy / random_policy)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {name!r}; allowed names: {list_envs()}")
    return importlib.import_module(_REGISTRY[name][0].split(":")[0])


__all__ = ["make", "list_envs", "module_of", "Environment", "TimeStep", "PAD_ID", "EOS_ID",
           "UNK_ID", "BOS_ID", "SEP_ID", "SPECIAL_TOKENS", "match_action",
           "action_tokens_equal", "vmap_reset", "vmap_step"]
