"""Tests of asct_jax/envs/base.py: the Environment base class's step bookkeeping."""
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs import PAD_ID


def tree_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def key_data(k):
    return np.asarray(jax.random.key_data(k)) if jnp.issubdtype(k.dtype, jax.dtypes.prng_key) \
        else np.asarray(k)


def test_base_step_bookkeeping():
    """Environment.step wraps step_env: key split, turn counter, turn limit with
    on_timeout, absorbing done with absorbing_feedback, TimeStep."""
    import chex
    from asct_jax.envs import Environment

    @chex.dataclass(frozen=True)
    class S:
        key: chex.PRNGKey
        turn: chex.Array
        done: chex.Array
        x: chex.Array

    class Counter(Environment):
        num_actions, action_len, obs_len, feedback_len, max_turns = 2, 2, 1, 2, 3
        seen_keys = []

        def reset_env(self, key, params):
            return S(key=key, turn=jnp.int32(0), done=jnp.array(False), x=jnp.int32(0))

        def step_env(self, state, action, key, params):
            self.seen_keys.append(key)
            x = state.x + action[0]
            return state.replace(x=x, done=x >= 10), jnp.array([7, 7], jnp.int32), \
                jnp.float32(1.0)

        def on_timeout(self, state, feedback, params):
            return state.replace(x=jnp.int32(-1)), jnp.array([9, 9], jnp.int32), \
                jnp.float32(0.5)

        def absorbing_feedback(self, params):
            return jnp.array([5, 5], jnp.int32)

        def observe(self, state, params):
            return state.x[None]

        def info(self, state, params):
            return {"success": jnp.float32(0.0), "score": state.x.astype(jnp.float32)}

    env = Counter()
    s, ts = env.reset(jax.random.PRNGKey(0), None)
    assert int(s.turn) == 0 and np.all(np.asarray(ts.feedback) == PAD_ID)
    s1, ts = env.step(s, jnp.array([1, 0]), None)
    k_next, k_step = jax.random.split(s.key)
    assert key_data(s1.key).tolist() == key_data(k_next).tolist()
    assert key_data(env.seen_keys[-1]).tolist() == key_data(k_step).tolist()
    assert int(s1.turn) == 1 and float(ts.reward) == 1.0 and ts.feedback.tolist() == [7, 7]
    s2, ts = env.step(s1, jnp.array([1, 0]), None)
    s3, ts = env.step(s2, jnp.array([1, 0]), None)          # turn limit: on_timeout
    assert bool(ts.done) and int(s3.x) == -1 and float(ts.reward) == 1.5
    assert ts.feedback.tolist() == [9, 9] and int(ts.observation[0]) == -1
    s4, ts = env.step(s3, jnp.array([1, 0]), None)          # absorbing
    assert tree_equal(s4, s3) and float(ts.reward) == 0.0 and ts.feedback.tolist() == [5, 5]
    s, _ = env.reset(jax.random.PRNGKey(1), None)
    s, ts = env.step(s, jnp.array([10, 0]), None)           # step_env ends the episode
    assert bool(ts.done) and int(s.x) == 10 and float(ts.reward) == 1.0
    assert ts.feedback.tolist() == [7, 7]
