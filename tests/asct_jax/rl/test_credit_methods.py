"""Registered credit methods end to end on a small batch: shapes, masks, cost accounting,
and the chunked VinePPO values against the plain vmapped Monte-Carlo estimate.

Integration test of every registered method (asct_jax.rl, asct_jax.search, factor_jax),
kept under its entry point: asct_jax.rl.credit's method contract."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.rl import advantages as adv
from asct_jax.rl.credit import state_policy_fn
from asct_jax.search.methods import live_state_values
from asct_jax.search.rollout_value import mc_return
from experiments.configs import base
from experiments.harness import registry


@pytest.fixture(scope="module")
def setup(credit_setup):
    c = base.use_test_model(base.get_config())
    c.env.name = "rag_workflow"
    c.vineppo.k = 2
    return credit_setup(c)      # conftest: 2 x 2 episodes of the fresh policy


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


def _penalised_batch():
    """2 episodes x 3 turns x 2 tokens; ep 0's middle step is invalid: recorded rewards
    r - p = (0, -0.1, 1), penalties (0, 0.1, 0); ep 1 rewards 0. Observations 1, 2, 3."""
    from asct_jax.rl.types import Rollout
    fields = {f: None for f in Rollout.__dataclass_fields__}
    p = jnp.array([[0., 0.1, 0.], [0., 0., 0.]])
    return Rollout(**dict(fields, rewards=jnp.array([[0., 0., 1.], [0., 0., 0.]]) - p,
                          penalties=p, turn_mask=jnp.ones((2, 3), bool),
                          token_mask=jnp.ones((2, 3, 2), bool),
                          obs=jnp.tile(jnp.arange(1, 4, dtype=jnp.int32)[None, :, None],
                                       (2, 1, 1))))


@pytest.mark.parametrize("method", ["grpo", "gigpo"])
def test_group_methods_place_the_penalty_as_verl_agent_does(method):
    """Defaults (verl-agent's): the penalty comes off the invalid step's own score / R_t.
    GRPO's step scores (1, 0.9, 1 | 0, 0, 0) centred on 29/60 (mean_norm: GiGPO, plus its
    anchor pairs' +-(0.125, 0.2, 0.5), gamma 0.5); penalty = "reward" and per-episode
    statistics give the earlier numbers (R(tau) = 0.9 on every step of episode 0)."""
    from asct_jax.rl.credit import CreditContext
    batch = _penalised_batch()
    ctx = CreditContext(policy=None, env=None, env_params=None, group_size=2)
    m = registry.get(method)
    c = base.get_config()
    c.gigpo.gamma = 0.5

    def coef(**fields):
        for k, v in fields.items():
            c[method][k] = v
        return np.asarray(m.make_credit(m.make_config(c), ctx)(None, batch, None, 0).coef)

    if method == "grpo":
        c.grpo = {}    # an empty section: its fields' defaults
    centred = np.array([[31, 25, 31], [-29, -29, -29]]) / 60
    if method == "grpo":
        want = centred / np.sqrt(5070 / 18000)        # sample std of the six scores
        old = np.array([[1.0] * 3, [-1.0] * 3]) / np.sqrt(2)   # G = (0.9, 0): +-0.45 / 0.45 sqrt2
    else:
        a_s = np.array([[0.125, 0.2, 0.5], [-0.125, -0.2, -0.5]])
        want = centred + a_s
        old = np.array([[0.45 + 0.1, 0.45 + 0.2, 0.45 + 0.5],    # R_0 of ep 0: 0.2
                        [-0.45 - 0.1, -0.45 - 0.2, -0.45 - 0.5]])
    np.testing.assert_allclose(coef(), want[..., None] * np.ones(2), rtol=1e-5)
    stats = "stats" if method == "grpo" else "episode_stats"
    np.testing.assert_allclose(coef(penalty="reward", **{stats: "episodes"}),
                               old[..., None] * np.ones(2), rtol=1e-5)


@pytest.mark.parametrize("method", ["vineppo", "asct_agentuct", "factor", "serl", "grpo",
                                    pytest.param("asct_factor", marks=pytest.mark.slow),
                                    "gigpo"])
def test_credit_is_masked_finite_and_counts_its_costs(setup, method):
    c, ctx, params, batch = setup
    m = registry.get(method)
    cfg = m.make_config(c)
    fn = m.make_credit(cfg, ctx)
    mstate = m.init_state(cfg, ctx, params, jax.random.key(3)) if m.stateful else None
    credit = jax.jit(fn)(params, batch, jax.random.key(2), jnp.int32(0), mstate)
    coef = np.asarray(credit.coef)
    assert coef.shape == batch.token_mask.shape and np.all(np.isfinite(coef))
    assert np.all(coef[~np.asarray(batch.token_mask)] == 0)
    if method in ("vineppo", "asct_agentuct", "factor", "asct_factor"):
        assert float(credit.metrics["env_calls"]) > 0
        assert float(credit.metrics["aux_tokens"]) > 0


def test_serl_without_its_teacher_is_grpo_over_step_samples(setup):
    """With lam = 0 (past the decay) SERL's coefficients are GRPO's, penalties and step
    statistics included (both read verl-agent's compute_grpo_outcome_advantage)."""
    c, ctx, params, batch = setup
    live = np.asarray(batch.turn_mask)
    p = jnp.asarray(np.where(live & (np.arange(live.shape[1]) % 2 == 1), 0.1, 0.0),
                    jnp.float32)
    batch = batch.replace(rewards=batch.rewards - p, penalties=p)
    coef = {}
    for name in ("serl", "grpo"):
        m = registry.get(name)
        cfg = m.make_config(c)
        mstate = m.init_state(cfg, ctx, params, jax.random.key(3)) if m.stateful else None
        coef[name] = np.asarray(m.make_credit(cfg, ctx)(params, batch, jax.random.key(2),
                                                         jnp.int32(10**6), mstate).coef)
    np.testing.assert_allclose(coef["serl"], coef["grpo"], rtol=1e-6, atol=1e-7)
    assert np.any(coef["grpo"] != 0)


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


def _factor_step(c, ctx, params, batch, step, mstate=None):
    from factor_jax.methods import factor_config, factor_pieces, init_critic_state
    fc = factor_config(c)
    if mstate is None:
        mstate = init_critic_state(fc, ctx, params, jax.random.key(5))
    return jax.jit(lambda pr, b, k, s, ms: factor_pieces(fc, ctx, pr, b, k, s, ms))(
        params, batch, jax.random.key(4), jnp.int32(step), mstate)


def test_factor_credit_is_the_warmup_split_then_tac_with_mean_one_weights(setup):
    """The authors' FACTOR on a real batch: at k <= warm-up A*_t = A_seq / T_i; after it
    TAC's credits (target head) telescope to A_seq; omega has mean 1 over every action and
    is >= 1 - eta; C = A* omega; the critic's replay holds this step's checkpoint targets."""
    import factor_jax as fj

    c, ctx, params, batch = setup
    c = c.copy_and_resolve_references()
    c.train.steps = 150                       # the schedules as the authors'
    turn = np.asarray(batch.turn_mask)
    warm = _factor_step(c, ctx, params, batch, step=0)
    np.testing.assert_allclose(np.asarray(warm.credit),
                               np.asarray(fj.warmup_credit(warm.a_seq, batch.turn_mask)),
                               atol=1e-6)
    assert float(warm.eta) == 0.0 and bool(warm.warm)
    assert int(warm.critic.cursor) == 1
    assert int(np.asarray(warm.critic.valid).sum()) == int(np.asarray(warm.cont.valid).sum())
    late = _factor_step(c, ctx, params, batch, step=14)      # k = 15: eta active
    assert not bool(late.warm) and 0 < float(late.eta) < 0.7
    # rag_workflow rewards only the last turn: the credit sums to A_seq.
    for total in (late.credit_total, late.a_seq):
        np.testing.assert_allclose(np.asarray(late.credit).sum(1), np.asarray(total),
                                   atol=1e-5)
    w, mask = np.asarray(late.weights), np.asarray(late.alloc_mask)
    real = mask.any(-1)
    np.testing.assert_allclose((w * mask).sum(-1)[real] / mask.sum(-1)[real], 1.0, atol=1e-5)
    assert np.all(w[mask] >= 1 - float(late.eta) - 1e-5) and np.all(w[~mask] == 0)
    np.testing.assert_allclose(np.asarray(late.coef),
                               np.asarray(late.credit)[..., None] * w, atol=1e-6)
    assert np.all(np.asarray(late.credit)[~turn] == 0)


def test_factor_tac_keeps_the_step_rewards_unless_zero(setup):
    """The authors' r_t reach TAC (fj.tac_rewards): with step rewards on the batch,
    A*(keep) - A*(zero) is the env's reward before the last turn and 0 on it (the terminal
    reward replaces it)."""
    c, ctx, params, batch = setup
    c = c.copy_and_resolve_references()
    c.train.steps = 150
    turn = np.asarray(batch.turn_mask)
    t = np.arange(turn.shape[1])[None, :]
    env_r = np.where(turn, 0.1 * (t + 1), 0.0).astype(np.float32)
    stepped = batch.replace(rewards=jnp.asarray(env_r))
    late = {}
    for mode in ("keep", "zero"):
        c.factor.step_rewards = mode
        late[mode] = _factor_step(c, ctx, params, stepped, step=14)
    before_last = turn & (t < turn.sum(1)[:, None] - 1)
    np.testing.assert_allclose(np.asarray(late["keep"].credit - late["zero"].credit),
                               np.where(before_last, env_r, 0.0), atol=1e-5)
    np.testing.assert_allclose(np.asarray(late["keep"].credit_total - late["zero"].credit_total),
                               np.where(before_last, env_r, 0.0).sum(1), atol=1e-5)


def test_factor_kl_is_lambda_times_the_forward_kl_kernel(setup):
    """FACTOR's auxiliary loss (Method.make_aux_loss) is lambda_k times the token-mean
    forward KL from the teacher's distributions in loss_inputs; kl_coef 0 makes none."""
    import factor_jax as fj
    from asct_jax.rl.types import merge_batch_turns as flat

    c, ctx, params, batch = setup
    factor = registry.get("factor")
    cfg = factor.make_config(c)
    credit = jax.jit(factor.make_credit(cfg, ctx))(
        params, batch, jax.random.key(2), jnp.int32(1),
        factor.init_state(cfg, ctx, params, jax.random.key(3)))
    b, t = batch.turn_mask.shape
    li = credit.loss_inputs
    reduce = factor.make_dist_reduce(cfg, ctx)
    out = ctx.policy.action_outputs(params, flat(batch.obs), flat(batch.responses),
                                    flat(batch.cand_tokens), flat(batch.cand_mask),
                                    dist_reduce=(reduce.fn, flat(reduce.inputs(credit))))
    out = jax.tree.map(lambda x: x.reshape((b, t) + x.shape[1:]), out)
    loss, m = factor.make_aux_loss(cfg, ctx)(out, batch, credit)
    from factor_jax.teacher import teacher_outputs
    _, _, support = teacher_outputs(ctx, params, batch)
    kl = fj.kl_token_mean(fj.forward_kl(li["teacher_dist"], out.dist_logp, support),
                          batch.token_mask)
    from factor_jax.methods import Schedule
    decay = Schedule.of(cfg).kl_decay          # 50 of 150 steps, scaled to train.steps
    assert decay == round(50 * c.train.steps / 150)
    np.testing.assert_allclose(float(li["kl_weight"]), 1.0 - 2 / decay, rtol=1e-6)
    np.testing.assert_allclose(float(loss), float(li["kl_weight"] * kl), rtol=1e-6)
    assert float(kl) >= 0.0
    c2 = c.copy_and_resolve_references()
    c2.factor.kl_coef = 0.0
    cfg2 = factor.make_config(c2)
    assert factor.make_aux_loss(cfg2, ctx) is None and factor.make_dist_reduce(cfg2, ctx) is None

def test_factor_step_rewards_auto_zeroes_them_only_where_g_is_the_return():
    import dataclasses
    from factor_jax.methods import FactorConfig, step_rewards_of
    auto = dataclasses.replace(FactorConfig(**{f.name: None for f in dataclasses.fields(
        FactorConfig)}), step_rewards="auto")
    assert step_rewards_of(auto, "success") == "keep"       # ALFWorld / ScienceWorld G
    assert step_rewards_of(auto, "score") == "keep"         # WebShop G
    assert step_rewards_of(auto, "return") == "zero"        # G = sum_t r_t already
    assert step_rewards_of(dataclasses.replace(auto, step_rewards="keep"), "return") == "keep"


@pytest.mark.parametrize("field, value", [("grpo.stats", "turns"), ("grpo.penalty", "tokens"),
                                          ("gigpo.penalty", "tokens"), ("serl.stats", "turns"),
                                          ("serl.penalty", "tokens")])
def test_group_method_fields_reject_unknown_values(field, value):
    from asct_jax.infra.checks import ConfigError
    c = base.get_config()
    section, name = field.split(".")
    if section not in c:
        c[section] = {}
    c[section][name] = value
    with pytest.raises(ConfigError, match=rf"^{field}: '{value}' is not allowed"):
        registry.get(section).make_config(c)


@pytest.mark.slow
def test_asct_factor_spreads_agentucts_credit_over_each_actions_tokens_at_its_budget(setup):
    """asct_factor at step 0 (eta_1 = eta0 > 0) against asct_agentuct with the same key:
    the same search (its cache, so the same env calls and tokens), mean_j C_{t,j} = A_t
    per action, and the weights live (not all 1) where an action has >= 2 tokens."""
    c, ctx, params, batch = setup
    out = {}
    for name in ("asct_agentuct", "asct_factor"):
        m = registry.get(name)
        cfg = m.make_config(c)
        mstate = m.init_state(cfg, ctx, params, jax.random.key(3))
        out[name] = jax.jit(m.make_credit(cfg, ctx))(params, batch, jax.random.key(2),
                                                      jnp.int32(0), mstate)
    a, f = out["asct_agentuct"], out["asct_factor"]
    for k in ("env_calls", "aux_tokens"):
        assert float(a.metrics[k]) == float(f.metrics[k]) > 0
    mask = np.asarray(batch.token_mask & batch.action_mask if batch.action_mask is not None
                      else batch.token_mask)
    n = np.maximum(mask.sum(-1), 1)
    mean_f = np.where(mask, np.asarray(f.coef), 0).sum(-1) / n
    mean_a = np.where(mask, np.asarray(a.coef), 0).sum(-1) / n
    np.testing.assert_allclose(mean_f, mean_a, atol=1e-5)
    assert float(f.metrics["factor/eta"]) == pytest.approx(0.7)
    assert float(f.metrics["factor/conservation_err_max"]) < 1e-5
    assert float(f.metrics["factor/multi_token_share"]) > 0   # rag_workflow: several tokens
    assert float(f.metrics["factor/weight_spread"]) > 0


@pytest.mark.slow
def test_asct_factor_leaves_a_written_turns_reasoning_tokens_agentuct_credit(setup):
    """With tokens outside the action tags (a generating actor's reasoning; here the first
    token of every turn marked so), those tokens keep AgentUCT's A_t and the action tokens
    average to it, so a decision's mean credit is A_t under ASCT's standardisation too."""
    c, ctx, params, batch = setup
    tm = np.asarray(batch.token_mask)
    reasoning = np.zeros_like(tm)
    reasoning[..., 0] = tm[..., 0] & (tm.sum(-1) >= 3)      # keeps >= 2 action tokens
    assert reasoning.any()
    batch = batch.replace(action_mask=jnp.asarray(~reasoning))
    out = {}
    for name in ("asct_agentuct", "asct_factor"):
        m = registry.get(name)
        cfg = m.make_config(c)
        mstate = m.init_state(cfg, ctx, params, jax.random.key(3))
        out[name] = np.asarray(jax.jit(m.make_credit(cfg, ctx))(
            params, batch, jax.random.key(2), jnp.int32(0), mstate).coef)
    a, f = out["asct_agentuct"], out["asct_factor"]
    np.testing.assert_allclose(f[reasoning], a[reasoning], atol=1e-6)
    act = tm & ~reasoning
    n = np.maximum(act.sum(-1), 1)
    np.testing.assert_allclose(np.where(act, f, 0).sum(-1) / n,
                               np.where(act, a, 0).sum(-1) / n, atol=1e-5)
    assert np.any(f[reasoning] != 0)
    standardised = [np.asarray(adv.standardise_coefficients(
        jnp.asarray(x), batch.turn_mask, batch.token_mask)) for x in (a, f)]
    np.testing.assert_allclose(standardised[1][reasoning], standardised[0][reasoning],
                               atol=1e-5)
