"""A small random `Rollout` for the tests of credit methods that need no environment or
model (factor_jax.baselines, factor_jax.asct_factor, asct_jax.rl.methods): masks, rewards,
penalties, feedback and log-probs of the kind a rollout records, NumPy-seeded."""
import jax.numpy as jnp
import numpy as np

from asct_jax.rl.types import Rollout


def random_rollout(seed: int, num_groups: int = 2, group_size: int = 2, turns: int = 3,
                   action_len: int = 3, feedback_len: int = 2, obs_len: int = 2,
                   pad_id: int = 0, action_mask: bool = True, penalty: float = 0.1,
                   obs_values: int = 0) -> Rollout:
    """B = num_groups * group_size episodes of T = turns: prefix turn masks (each episode
    1..T turns), 1..A real tokens per real turn, a penalty on ~30% of the real turns (in
    `rewards`, as recorded, and in `penalties`), feedback that is all `pad_id` on about a
    quarter of the turns, log-probs <= 0 on the tokens; `action_mask`: a generating
    actor's (the last token of a turn is outside the action about half the time), else
    None. obs_values > 0: obs tokens drawn from 1..obs_values (equal observations recur)."""
    rng = np.random.default_rng(seed)
    b, t, a = num_groups * group_size, turns, action_len
    turn_mask = np.arange(t)[None] < rng.integers(1, t + 1, b)[:, None]
    token_mask = turn_mask[..., None] & (np.arange(a) < rng.integers(1, a + 1, (b, t, 1)))
    amask = np.ones((b, t, a), bool)
    amask[..., -1] = rng.random((b, t)) < 0.5
    penalties = np.where(turn_mask & (rng.random((b, t)) < 0.3), penalty, 0.0)
    rewards = np.where(turn_mask, rng.normal(size=(b, t)), 0.0) - penalties
    feedback = np.where(rng.random((b, t, feedback_len)) < 0.5, 7, pad_id)
    obs = (rng.integers(1, obs_values + 1, (b, t, obs_len)) if obs_values
           else np.zeros((b, t, obs_len)))
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    return Rollout(
        obs=jnp.asarray(obs, jnp.int32), feedback=jnp.asarray(feedback, jnp.int32),
        responses=jnp.ones((b, t, a), jnp.int32), action_index=jnp.zeros((b, t), jnp.int32),
        token_mask=jnp.asarray(token_mask), turn_mask=jnp.asarray(turn_mask),
        logp_old=f32(np.where(token_mask, -rng.exponential(size=(b, t, a)), 0.0)),
        values=f32(np.where(turn_mask, rng.normal(size=(b, t)), 0.0)), rewards=f32(rewards),
        penalties=f32(penalties), dones=jnp.zeros((b, t), bool),
        cand_tokens=jnp.zeros((b, t, 1, a), jnp.int32), cand_mask=jnp.ones((b, t, 1), bool),
        cand_costs=jnp.zeros((b, t, 1)), states=(), final_info={},
        group=jnp.repeat(jnp.arange(num_groups), group_size), env_calls=jnp.int32(0),
        action_mask=jnp.asarray(amask) if action_mask else None)
