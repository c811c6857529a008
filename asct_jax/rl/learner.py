"""The learner bundle: everything the compiled steps need, built once per run.

`asct_jax.rl.build.build_learner` makes it; the step factories of
asct_jax.rl.train_step take it whole (make_learn_step(learner), make_train_step(learner,
env, env_params), ...), so a new piece is one field here, not an argument everywhere.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from asct_jax.rl.credit import (AuxLossFn, CreditContext, CreditFn, DistReduce, Method,
                                PolicyLossFn)
from asct_jax.rl.protocol import Protocol


@dataclasses.dataclass
class Learner:
    """ppo: the update's protocol (asct_jax.rl.protocol, resolved). num_groups, group_size:
    the rollout batch (B = num_groups * group_size). method, method_config: the registered
    method and its typed config; ctx: its CreditContext; credit_fn, policy_loss_fn (None: the clipped
    surrogate), aux_loss_fn (None: no auxiliary loss), dist_reduce (None: no reduction
    of the update's distributions): what it built. init_state: the TrainState at step 0
    (method state and KL reference included), placed with state_sharding.
    key: key(seed), replicated."""

    ppo: Protocol
    num_groups: int
    group_size: int
    policy: Any                 # asct_jax.rl.policy.Policy
    mesh: Mesh
    method: Method
    method_config: Any
    ctx: CreditContext
    credit_fn: CreditFn
    aux_loss_fn: Optional[AuxLossFn]
    policy_loss_fn: Optional[PolicyLossFn]
    dist_reduce: Optional[DistReduce]
    optimizer: Any              # optax.GradientTransformation
    init_state: Any             # asct_jax.rl.train_step.TrainState
    state_sharding: Any
    key: Any

    @property
    def replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, P())

    @property
    def batch_size(self) -> int:
        return self.num_groups * self.group_size
