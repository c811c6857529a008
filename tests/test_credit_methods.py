"""Registered credit methods end to end on a small batch: shapes, masks, cost accounting,
and the chunked VinePPO values against the plain vmapped Monte-Carlo estimate."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.rl.credit import CreditContext, state_policy_fn
from asct_jax.rl.rollout import rollout
from asct_jax.rl.trainer import JaxEnvSource, build_policy
from asct_jax.search.methods import live_state_values
from asct_jax.search.rollout_value import mc_return
from experiments import registry
from experiments.configs import base


@pytest.fixture(scope="module")
def setup():
    c = base.use_test_model(base.get_config())
    c.env.name = "rag_workflow"
    c.rollout.num_groups, c.rollout.group_size = 2, 2
    c.asct.search.num_simulations = 4
    c.vineppo.k = 2
    source = JaxEnvSource(c)
    env, env_params = source.env, source.env_params
    policy, params = build_policy(c, source.vocab_size, source.shape)
    ctx = CreditContext(policy=policy, env=env, env_params=env_params, group_size=2)
    batch = jax.jit(lambda p, k: rollout(policy, p, env, env_params, k, 2, 2))(
        params, jax.random.key(0))
    return c, ctx, params, batch


def test_registry_names_each_method_once_and_rejects_unknown_names():
    assert len(set(registry.names())) == len(registry.names()) >= 14
    assert all(registry.get(n).name == n for n in registry.names())
    assert "gigpo" in registry.names()
    assert base.get_constraints()["method"] == registry.names()
    with pytest.raises(ValueError, match=r"^method: unknown credit method 'nope'; allowed: ppo"):
        registry.get("nope")


def test_chunked_vineppo_values_equal_plain_vmap(setup):
    c, ctx, params, batch = setup
    key = jax.random.key(1)
    v, aux, calls = jax.jit(lambda p, b, k: live_state_values(ctx, p, b, k, 2, chunk=3))(
        params, batch, key)
    b, t = batch.turn_mask.shape
    n = b * t
    n_pad = -(-n // 3) * 3
    keys = jax.random.split(key, n_pad)[:n]
    states = jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), batch.states)
    pf = state_policy_fn(ctx, params)
    ref, _, ref_aux, ref_calls = jax.jit(jax.vmap(
        lambda s, k: mc_return(ctx.env, ctx.env_params, s, pf, k, 2)))(states, keys)
    live = np.asarray(batch.turn_mask).reshape(-1)
    np.testing.assert_allclose(np.asarray(v).reshape(-1)[live], np.asarray(ref)[live],
                               rtol=1e-5, atol=1e-5)
    assert float(calls) == float(np.asarray(ref_calls)[live].sum())
    assert np.all(np.asarray(v)[~np.asarray(batch.turn_mask)] == 0)


@pytest.mark.parametrize("method", ["vineppo", "asct_agentuct", "factor", "serl",
                                    pytest.param("asct_factor", marks=pytest.mark.slow),
                                    "gigpo"])
def test_credit_is_masked_finite_and_counts_its_costs(setup, method):
    c, ctx, params, batch = setup
    m = registry.get(method)
    fn = m.make_credit(m.make_config(c), ctx)
    credit = jax.jit(fn)(params, batch, jax.random.key(2), jnp.int32(0), None)
    coef = np.asarray(credit.coef)
    assert coef.shape == batch.token_mask.shape and np.all(np.isfinite(coef))
    assert np.all(coef[~np.asarray(batch.token_mask)] == 0)
    if method in ("vineppo", "asct_agentuct", "factor", "asct_factor"):
        assert float(credit.metrics["env_calls"]) > 0
        assert float(credit.metrics["aux_tokens"]) > 0


@pytest.mark.slow
def test_vineppo_skip_survives_a_seed_batch(setup):
    """In a seed batch (vmap with the seed axis named) VinePPO's chunk skip stays a
    lax.cond, not a select computing every chunk, and the values equal the single run's."""
    import dataclasses

    c, ctx, params, batch = setup
    seeded = dataclasses.replace(ctx, seed_axis="seed")
    key = jax.random.key(1)
    one = jax.jit(lambda p, b, k: live_state_values(ctx, p, b, k, 2, chunk=3))(
        params, batch, key)
    two = lambda x: jnp.stack([x, x])  # noqa: E731
    fn = jax.vmap(lambda p, b, k: live_state_values(seeded, p, b, k, 2, chunk=3),
                  axis_name="seed")
    args = (jax.tree.map(two, params), jax.tree.map(two, batch), jnp.stack([key, key]))
    assert " cond[" in str(jax.make_jaxpr(fn)(*args))
    both = jax.jit(fn)(*args)
    for single, batched in zip(one, both):
        for i in range(2):
            np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(single),
                                       rtol=1e-5, atol=1e-6)


def test_factor_allocates_over_the_choice_tokens(setup):
    """factor.alloc_tokens = "choice" (default) puts every action's credit on the tokens
    where the actor had a choice (mean omega 1 there, C = 0 on the forced tokens, whose
    constrained log-prob is 0); "all" weighs every real token."""
    import factor_jax as fj
    from factor_jax.methods import allocation_mask, factor_config, factor_pieces
    c, ctx, params, batch = setup
    assert c.factor.alloc_tokens == "choice"
    p = jax.jit(lambda pr, b, k: factor_pieces(factor_config(c), ctx, pr, b, k))(
        params, batch, jax.random.key(2))
    tm = np.asarray(batch.token_mask)
    choice = np.asarray(fj.choice_tokens(batch.actions, batch.cand_tokens, batch.cand_mask,
                                         batch.token_mask))
    assert 0 < choice.sum() < tm.sum()   # the batch has both kinds
    np.testing.assert_array_equal(p.alloc_mask, choice)
    np.testing.assert_array_equal(allocation_mask("all", batch), tm)
    w, m = np.asarray(p.weights), np.asarray(p.alloc_mask)
    has = m.any(-1)
    np.testing.assert_allclose((w * m).sum(-1)[has] / m.sum(-1)[has], 1.0, atol=1e-5)
    assert np.all(w[~m] == 0) and np.all(np.asarray(p.coef)[~m] == 0)
    assert np.all(np.asarray(batch.logp_old)[tm & ~choice] == 0)


def test_factor_distillation_is_its_weight_times_the_kernel(setup):
    """factor.distill_coef > 0 makes the hindsight distillation FACTOR's auxiliary loss
    (Method.make_aux_loss: what the train step adds), reading the teacher from the
    credit's loss_inputs; 0 (the tiny actor's default) makes none and carries no teacher."""
    import factor_jax as fj
    c, ctx, params, batch = setup
    factor = registry.get("factor")
    cfg = factor.make_config(c)
    assert factor.make_aux_loss(cfg, ctx) is None
    assert jax.jit(factor.make_credit(cfg, ctx))(params, batch, jax.random.key(2), 0,
                                                 None).loss_inputs is None
    c = c.copy_and_resolve_references()
    c.factor.distill_coef = 0.05
    cfg = factor.make_config(c)
    credit = jax.jit(factor.make_credit(cfg, ctx))(params, batch, jax.random.key(2), 0, None)
    assert credit.loss_inputs.shape == batch.token_mask.shape
    teacher = jnp.where(batch.token_mask, batch.logp_old - 0.5, 0.0)
    loss, m = factor.make_aux_loss(cfg, ctx)(batch.logp_old, batch,
                                             credit.replace(loss_inputs=teacher))
    ref, ref_m = fj.distillation_loss(batch.logp_old, teacher, batch.token_mask)
    np.testing.assert_allclose(loss, 0.05 * ref, rtol=1e-6)
    assert float(ref) > 0 and float(m["distill_kl"]) == float(ref_m["distill_kl"])
