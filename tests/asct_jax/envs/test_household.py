"""Tests of `household` (asct_jax.envs.household) beyond the protocol of test_envs.py."""
import jax
import jax.numpy as jnp

from asct_jax.envs import make
from asct_jax.envs.tokenizer import decode


def test_household_named_status_burnt():
    from asct_jax.envs.household import Kind, Status, Task, slot_kind

    env, p = make("household", size="small")
    s, _ = env.reset(jax.random.PRNGKey(0), p)
    R, N = env.R, env.N
    assert [int(slot_kind(i, R, N)) for i in range(env.num_actions)] == \
        [Kind.GO] * R + [Kind.TAKE] * N + [Kind.PUT, Kind.CLEAN, Kind.HEAT, Kind.COOL]
    # hold the target at the microwave: heating twice burns it
    micro = int(p.appliances[Task.HEAT - 1])
    s = s.replace(held=s.target, obj_loc=s.obj_loc.at[s.target].set(-1), loc=jnp.int32(micro))
    heat = env.legal_actions(s, p)[0][R + N + 1 + (Task.HEAT - 1)]
    s, _ = env.step(s, heat, p)
    assert bool(s.status[s.target, Status.HOT]) and not bool(s.status[s.target, Status.BURNT])
    s, ts = env.step(s, heat, p)
    assert bool(s.status[s.target, Status.BURNT]) and "burnt" in decode(ts.feedback)
