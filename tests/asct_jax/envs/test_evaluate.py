"""asct_jax.envs.evaluate: `scripted_chooser` (the policy vmapped over the episodes with
one key each, its index turned into the candidate's tokens) and `rollout` / `episode`
against a plain Python loop over env.reset / env.step on a small ToyTree with reward
noise (so the reset key matters): per episode i, split(key, batch)[i] -> (reset key,
policy key), the policy key split into one key per turn; return = the summed rewards,
length = the turns played, the final info. One jit of rollout and one of episode."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.envs import evaluate
from asct_jax.envs.play import Choice
from asct_jax.envs.toy_tree import ToyTree

ENV = ToyTree(num_actions=4, depth=3, action_len=3)
PARAMS = ENV.make_params(seed=1, reward_noise=0.3, early_stop_prob=0.35)
BATCH = 12
KEY = jax.random.PRNGKey(7)


def policy(state, params, key):
    """Depends on the state, the params and the key; may pick an illegal candidate (a
    "nothing happens" turn)."""
    shift = (params.costs[0] > 0).astype(jnp.int32)                 # 1
    return ((state.node + shift * jax.random.randint(key, (), 0, 4)) % 4).astype(jnp.int32)


def _reference(key):
    """One episode played by hand with env.reset / env.step (jitted) and the documented keys."""
    k_reset, k_pol = jax.random.split(key)
    turn_keys = jax.random.split(k_pol, ENV.max_turns)
    state, ts = _reset(k_reset)
    ret, length, illegal = 0.0, 0, 0
    for t in range(ENV.max_turns):
        if bool(state.done):
            break
        cands, legal = ENV.legal_actions(state, PARAMS)
        idx = int(policy(state, PARAMS, turn_keys[t]))
        illegal += not bool(legal[idx])
        state, ts = _step(state, cands[idx])
        ret += float(ts.reward)
        length += 1
    return dict(ret=ret, length=length, illegal=illegal, info=jax.device_get(ts.info))


_reset = jax.jit(lambda k: ENV.reset(k, PARAMS))
_step = jax.jit(lambda s, a: ENV.step(s, a, PARAMS))


@pytest.fixture(scope="module")
def batch_out():
    f = jax.jit(lambda k: evaluate.rollout(ENV, PARAMS, policy, k, BATCH))
    return jax.device_get(f(KEY))


def test_rollout_shapes_keys_and_info(batch_out):
    assert set(batch_out) == {"return", "length", "success", "score"}
    for name, x in batch_out.items():
        assert x.shape == (BATCH,), name
    assert batch_out["length"].dtype == np.int32
    assert np.all((batch_out["length"] >= 1) & (batch_out["length"] <= ENV.max_turns))
    np.testing.assert_allclose(batch_out["score"], batch_out["return"], rtol=1e-6)


def test_rollout_matches_a_hand_loop_with_the_documented_keys(batch_out):
    keys = jax.random.split(KEY, BATCH)
    refs = [_reference(k) for k in keys]
    np.testing.assert_array_equal(batch_out["length"], [r["length"] for r in refs])
    np.testing.assert_allclose(batch_out["return"], [r["ret"] for r in refs], rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(batch_out["success"], [r["info"]["success"] for r in refs])
    # the batch exercises what the loop must get right: early ends, timeouts, illegal
    # picks ("nothing happens" turns), distinct noisy returns
    lengths = batch_out["length"]
    assert lengths.min() < ENV.max_turns and np.any(lengths == ENV.max_turns)
    assert sum(r["illegal"] for r in refs) > 0
    assert len(set(np.round(batch_out["return"], 5))) > BATCH // 2


def test_episode_is_rollouts_episode_of_the_same_key(batch_out):
    f = jax.jit(lambda k: evaluate.episode(ENV, PARAMS, policy, k))
    keys = jax.random.split(KEY, BATCH)
    for i in (0, 5, BATCH - 1):
        one = jax.device_get(f(keys[i]))
        assert set(one) == set(batch_out)
        for name, x in one.items():
            assert x.shape == (), name
            # the same episode; float sums may differ by an ulp between batch shapes
            np.testing.assert_allclose(x, batch_out[name][i], rtol=1e-6, err_msg=name)


def test_rollout_depends_on_the_key():
    f = jax.jit(lambda k: evaluate.rollout(ENV, PARAMS, policy, k, BATCH))
    a, b = jax.device_get(f(KEY)), jax.device_get(f(jax.random.PRNGKey(8)))
    assert not np.array_equal(a["return"], b["return"])


def test_scripted_chooser_takes_each_episodes_candidate_with_its_own_key():
    """No environment: states [N] of a field `i`, candidates [N, K, A]; the policy adds a
    key-derived offset, so each episode must get keys[i]."""
    n, k, a = 5, 4, 3
    cands = jnp.arange(n * k * a, dtype=jnp.int32).reshape(n, k, a)
    states = {"i": jnp.asarray([0, 3, 1, 2, 3], jnp.int32)}
    keys = jax.random.split(jax.random.PRNGKey(0), n)

    def pol(s, params, key):
        return (s["i"] + params * jax.random.randint(key, (), 0, k)) % k

    choose = evaluate.scripted_chooser(pol, 1)
    c = choose(keys, states, None, cands, jnp.ones((n, k), bool), jnp.zeros((n, k)))
    offs = np.asarray([int(jax.random.randint(kk, (), 0, k)) for kk in keys])
    want = (np.asarray(states["i"]) + offs) % k
    assert isinstance(c, Choice) and c.logp is None and c.value is None
    np.testing.assert_array_equal(c.index, want)
    np.testing.assert_array_equal(c.response, np.asarray(cands)[np.arange(n), want])
    assert c.response.shape == (n, a)
    # params reach the policy: params 0 drops the key offset
    c0 = evaluate.scripted_chooser(pol, 0)(keys, states, None, cands, None, None)
    np.testing.assert_array_equal(c0.index, states["i"])
