"""How an update splits a batch (asct_jax.rl.minibatches)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from asct_jax.rl import minibatches as mbs
from tests.helpers.tiers import examples


def _rows(turn_mask):
    """A [B, T] batch whose leaf `id` names each turn row b * T + t."""
    b, t = turn_mask.shape
    return {"id": jnp.arange(b * t, dtype=jnp.int32).reshape(b, t) + 1,
            "turn_mask": jnp.asarray(turn_mask), "episode": jnp.arange(b) + 1,
            "scale": jnp.float32(2.0)}


def test_turn_rows_reshape_per_turn_and_repeat_per_episode():
    rows = mbs.to_turn_rows(_rows(np.ones((2, 3), bool)), 2, 3)
    assert rows["id"].shape == (6, 1) and rows["turn_mask"].shape == (6, 1)
    np.testing.assert_array_equal(rows["episode"], [1, 1, 1, 2, 2, 2])
    assert rows["scale"].shape == ()


def test_step_minibatches_by_hand():
    # Episode 0 has 1 real turn, episode 1 has 3 (T = 3): 4 real rows; size 2 ->
    # ceil(6 / 2) = 3 minibatches: the 4 real rows fill the first two, the third is padding.
    mask = np.array([[1, 0, 0], [1, 1, 1]], bool)
    rows = mbs.to_turn_rows(_rows(mask), 2, 3)
    out = mbs.split_turn_rows(rows, jax.random.key(0), jnp.asarray(mask), 2)
    ids = np.asarray(out["id"])[..., 0]
    assert ids.shape == (3, 2)
    assert sorted(ids[:2].ravel()) == [1, 4, 5, 6]          # rows (0,0), (1,0), (1,1), (1,2)
    assert not np.asarray(out["turn_mask"])[2].any()        # only padding or masked rows
    live = [bool(mbs.has_real_turns(out["turn_mask"][i])) for i in range(3)]
    assert live == [True, True, False]                      # 2 updates = ceil(4 / 2)
    np.testing.assert_array_equal(np.asarray(out["scale"]), [2.0, 2.0, 2.0])


@settings(max_examples=examples(25), deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 7), st.integers(0, 2 ** 16))
def test_every_real_turn_is_in_exactly_one_minibatch(b, t, size, seed):
    rng = np.random.default_rng(seed)
    mask = rng.random((b, t)) < 0.6
    rows = mbs.to_turn_rows(_rows(mask), b, t)
    out = mbs.split_turn_rows(rows, jax.random.key(seed), jnp.asarray(mask), size)
    ids = np.asarray(out["id"])[..., 0]
    real = np.asarray(out["turn_mask"])[..., 0]
    expect = sorted((np.arange(b * t) + 1)[mask.ravel()])
    assert sorted(ids[real]) == expect
    # Real rows come first: only the last live minibatch may be partly padding.
    n_live = sum(bool(r.any()) for r in real)
    assert n_live == -(-int(mask.sum()) // size)


def test_episode_minibatches_are_a_permutation_cut_evenly():
    tree = {"x": jnp.arange(8) * 10, "c": jnp.float32(1.0)}
    out = mbs.split_episodes(tree, jax.random.key(3), 4, 8)
    assert out["x"].shape == (4, 2) and out["c"].shape == (4,)
    assert sorted(np.asarray(out["x"]).ravel()) == list(range(0, 80, 10))


def _padded_split_order(mask, key, size):
    """The row order of the split before issue 49 (every minibatch `size` rows, padding
    rows -1): the reference for the real rows' membership and order."""
    real = np.asarray(mask).reshape(-1)
    rows = real.shape[0]
    count = -(-rows // size)
    u = np.asarray(jax.random.uniform(key, (rows,)))
    order = np.asarray(jnp.argsort(jnp.where(jnp.asarray(real), u, 1.0 + u)))
    order = np.concatenate([order, np.full(count * size - rows, -1)])
    return order.reshape(count, size)


@settings(max_examples=examples(25), deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 30), st.integers(0, 2 ** 16))
def test_step_minibatch_has_at_most_the_batch_rows_and_the_same_real_rows(b, t, size, seed):
    """A minibatch holds min(size, B * T) rows (never padded past the batch), there are
    ceil(B * T / size) of them (Protocol.minibatch_count), and every minibatch holds the
    same real rows in the same order as the padded split did."""
    from asct_jax.rl.methods import VERL

    rng = np.random.default_rng(seed)
    mask = rng.random((b, t)) < 0.6
    key = jax.random.key(seed)
    rows = mbs.to_turn_rows(_rows(mask), b, t)
    out = mbs.split_turn_rows(rows, key, jnp.asarray(mask), size)
    ids = np.asarray(out["id"])[..., 0] - 1                     # padding rows: -1
    count = dataclasses.replace(VERL, minibatch_size=size).minibatch_count(b, t)
    assert ids.shape == (count, min(size, b * t))
    ref = _padded_split_order(mask, key, size)
    real = mask.reshape(-1)
    for got, want in zip(ids, ref):
        keep = lambda r: [i for i in r if i >= 0 and real[i]]   # noqa: E731
        assert keep(got) == keep(want)


def test_small_batch_minibatch_is_the_batch_without_padding():
    # 2 episodes x 3 turns = 6 rows, size 256: one minibatch of the 6 rows, real ones first.
    mask = np.array([[1, 1, 0], [1, 0, 0]], bool)
    rows = mbs.to_turn_rows(_rows(mask), 2, 3)
    out = mbs.split_turn_rows(rows, jax.random.key(0), jnp.asarray(mask), 256)
    ids = np.asarray(out["id"])[0, :, 0]
    assert ids.shape == (6,)
    assert sorted(ids[:3]) == [1, 2, 4] and sorted(ids[3:]) == [3, 5, 6]
    real = np.asarray(out["turn_mask"])[0, :, 0]
    np.testing.assert_array_equal(real, [True, True, True, False, False, False])


@pytest.mark.slow
def test_compiled_step_update_memory_does_not_grow_with_the_padding():
    """GRPO under verl-agent's protocol (256 step samples) on 8 episodes x 10 turns = 80
    rows: the compiled learn step's temp memory (XLA's memory analysis, no timing) is that
    at minibatch_size = B * T, not that of 256 rows each a decoder pass with its saved
    activations (3x larger before issue 49)."""
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.rollout import rollout
    from asct_jax.rl.sources import JaxEnvSource
    from asct_jax.rl.train_step import make_learn_step, policy_params
    from experiments.configs import base as base_config
    from experiments.harness import registry

    c = base_config.use_test_model(base_config.get_config())
    c.method, c.env.name = "grpo", "household"
    c.rollout.num_groups, c.rollout.group_size = 2, 4
    c.train.num_devices = 1
    source = JaxEnvSource(c)
    learner = build_learner(c, registry.get("grpo"), source)
    assert learner.ppo.minibatch_unit == "steps" and learner.ppo.minibatch_size == 256
    state = learner.init_state
    data = jax.eval_shape(lambda p, k: rollout(learner.policy, p, source.env,
                                               source.env_params, k, 2, 4),
                          policy_params(state), jax.random.key(0))
    rows = data.turn_mask.shape[0] * data.turn_mask.shape[1]
    assert rows < 256

    def temp_bytes(size):
        ppo = dataclasses.replace(learner.ppo, minibatch_size=size)
        learn = make_learn_step(dataclasses.replace(learner, ppo=ppo))
        compiled = learn.lower(state, data, jax.random.key(1)).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    at_protocol, at_rows = temp_bytes(256), temp_bytes(rows)
    assert at_protocol <= 1.05 * at_rows, (at_protocol, at_rows)
