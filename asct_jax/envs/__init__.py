"""JAX-native multi-turn text environments and their registry.

    env, params = make("rag_workflow", size="small", component_set="transfer")
    state, ts = env.reset(key, params)

`make(name, size=..., **overrides)`: `size` is one of SIZES; overrides set fields of the
environment's settings dataclass (its Params: HouseholdParams, ShopParams, ScienceParams,
RagWorkflowParams, RagSpaceParams), whose `small()` / `hard()` presets the sizes are; for
toy_tree they are the ToyTree constructor arguments. `params` is that settings object
(toy_tree: its tables).
"""
from __future__ import annotations

from types import ModuleType
from typing import Any, Dict, Tuple

from asct_jax.envs import (_common, household, rag_workflow, ragspace, science, shop, tokenizer,
                           toy_tree)
from asct_jax.envs._common import SIZES
from asct_jax.envs.base import (  # noqa: F401  (re-exports)
    BOS_ID, EOS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID, Environment, TimeStep,
    action_tokens_equal, match_action)

# name -> (module, class with `from_size(size, **overrides)`).
_REGISTRY: Dict[str, Tuple[ModuleType, Any]] = {
    "rag_workflow": (rag_workflow, rag_workflow.RagWorkflow),
    "ragspace": (ragspace, ragspace.RagSpace),
    "household": (household, household.Household),
    "shop": (shop, shop.Shop),
    "science": (science, science.Science),
    "toy_tree": (toy_tree, toy_tree.ToyTree),
}
ENVS: Tuple[str, ...] = tuple(_REGISTRY)     # allowed environment names
# SIZES: allowed `size` values (re-exported from _common).


def _words() -> set:
    """Every word of the shared tokenizer: _common's and each registered module's."""
    words = set(_common.vocabulary())
    for mod, _ in _REGISTRY.values():
        words |= set(mod.vocabulary())
    return words


tokenizer.set_word_source(_words)


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
    env = _REGISTRY[name][1].from_size(size, **overrides)
    return env, env.default_params()


def module_of(name: str):
    """The module of a registered environment (its expert_policy / random_policy)."""
    _check_name(name)
    return _REGISTRY[name][0]


__all__ = ["make", "list_envs", "module_of", "ENVS", "SIZES", "Environment", "TimeStep",
           "PAD_ID", "EOS_ID", "UNK_ID", "BOS_ID", "SEP_ID", "SPECIAL_TOKENS", "match_action",
           "action_tokens_equal"]
