"""Imports every module that registers a credit method (see asct_jax.rl.credit).

asct_jax never imports factor_jax except here, through the registry.
"""
import importlib

import asct_jax.rl.credit  # noqa: F401  ppo_return, ppo_gae, grpo

for _module in ("asct_jax.search.methods", "factor_jax.methods"):
    try:
        importlib.import_module(_module)
    except ModuleNotFoundError as err:  # a method package that is not written yet
        if err.name != _module:
            raise
