"""Host adapters for real text games (not jittable), with the protocol of `base`."""
from asct_jax.envs.external.alfworld_env import AlfWorldEnv
from asct_jax.envs.external.base import (BatchedHostEnv, HostEnv, HostState, HostTimeStep,
                                         encode)
from asct_jax.envs.external.scienceworld_env import ScienceWorldEnv
from asct_jax.envs.external.textworld_env import TextWorldEnv
from asct_jax.envs.external.webshop_env import WebShopEnv
from asct_jax.envs.external.workers import ParallelHostEnv, WorkerError

HOST_ENVS = {
    "textworld": TextWorldEnv,
    "scienceworld": ScienceWorldEnv,
    "alfworld": AlfWorldEnv,
    "webshop": WebShopEnv,
}


def make_host_env(name: str, **kwargs) -> HostEnv:
    """Build a host adapter by name, e.g. make_host_env("textworld", games=DIR)."""
    if name not in HOST_ENVS:
        raise ValueError(f"Unknown host environment {name!r}; use one of {sorted(HOST_ENVS)}.")
    return HOST_ENVS[name](**kwargs)


__all__ = ["AlfWorldEnv", "BatchedHostEnv", "HostEnv", "HostState", "HostTimeStep",
           "ScienceWorldEnv", "TextWorldEnv", "WebShopEnv", "encode", "make_host_env",
           "HOST_ENVS", "ParallelHostEnv", "WorkerError"]
