"""Figure-5 diagnostics: conservation and calibration statistics, perturbations, and the
choice tokens of constrained decoding."""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

import factor_jax as fj
from tests.helpers.tiers import examples


def test_conservation_error():
    w = jnp.array([[[0.5, 1.5, 7.0], [0.2, 0.0, 0.0], [3.0, 3.0, 3.0]]])
    m = jnp.array([[[True, True, False], [True, False, False], [False, False, False]]])
    np.testing.assert_allclose(fj.conservation_error(w, m), [[0.0, 0.8, 0.0]], atol=1e-7)


def test_calibration_metrics():
    x = jnp.array([1.0, 2.0, 3.0, 100.0])
    m = jnp.array([True, True, True, False])
    out = fj.calibration_metrics(x, 2 * x + 1, m)
    np.testing.assert_allclose(out["corr"], 1.0, rtol=1e-6)
    np.testing.assert_allclose(out["bias"], -3.0, rtol=1e-6)  # mean(x - (2x + 1)) = -(2 + 1)
    np.testing.assert_allclose(out["count"], 3.0)


def test_extreme_tokens():
    w = jnp.array([[[0.5, 2.0, 0.1, 9.0]]])
    m = jnp.array([[[True, True, True, False]]])
    hi, lo = fj.extreme_tokens(w, m)
    assert int(hi[0, 0]) == 1 and int(lo[0, 0]) == 2


def test_conservation_of_apm_and_softmax_weights():
    s = jnp.array([[[0.3, -1.0, 2.0, 5.0], [0.0, 0.0, 0.0, 0.0]]])
    m = jnp.array([[[True, True, True, False], [False, False, False, False]]])
    out = fj.conservation(fj.apm_weights(s, m, 1.0), s, m)
    np.testing.assert_array_equal(out.real, [[True, False]])
    np.testing.assert_allclose(out.cons_apm, [[0.0, 0.0]], atol=1e-6)
    np.testing.assert_allclose(out.cons_softmax, [[1 - 1 / 3, 0.0]], atol=1e-6)
    np.testing.assert_allclose(out.weights_softmax.sum(-1), [[1.0, 0.0]], atol=1e-6)


def test_mc_credit_telescopes_to_return_minus_baseline():
    r = jnp.array([[0.0, 1.0, 2.0], [0.5, 0.0, 0.0]])
    v = jnp.array([[9.0, 3.0, -4.0], [7.0, 7.0, 7.0]])
    b = jnp.array([0.25, -1.0])
    tm = jnp.array([[True, True, True], [True, False, False]])
    a = fj.mc_credit(r, v, b, tm)
    ret = jnp.sum(jnp.where(tm, r, 0.0), axis=-1)
    np.testing.assert_allclose(jnp.sum(a, axis=-1), ret - b, atol=1e-6)   # sum A = G - b
    np.testing.assert_allclose(a[0], [3.0 - 0.25, 1.0 - 4.0 - 3.0, 2.0 + 4.0], atol=1e-6)


def test_perturbable_actions():
    credit = jnp.array([[1.0, -1.0, 1e-4, 2.0]])
    w = jnp.array([[[0.5, 1.5], [2.0, 0.0], [1.2, 0.8], [1.0, 0.0]]])
    m = jnp.array([[[True, True], [True, True], [True, True], [True, False]]])
    pos, neg, hi, lo = fj.perturbable_actions(credit, w, m, 1e-3)
    np.testing.assert_array_equal(pos, [[True, False, False, False]])  # one token: out
    np.testing.assert_array_equal(neg, [[False, True, False, False]])
    np.testing.assert_array_equal(hi[0, :3], [1, 0, 0])
    np.testing.assert_array_equal(lo[0, :3], [0, 1, 1])


def test_perturbed_actions_delete_swap_unk():
    filler, unk = 7, 9
    actions = jnp.array([[1, 2, 3]])
    cands = jnp.array([[[1, 2, 3], [1, 5, 3], [4, 2, 6]]])
    legal = jnp.array([[True, True, True]])
    hi, lo = jnp.array([1]), jnp.array([0])
    var = fj.perturbed_actions(actions, hi, lo, cands, legal, ("delete", "swap", "unk"),
                               filler, unk)
    assert var.shape == (1, 7, 3)
    np.testing.assert_array_equal(var[0], [
        [1, 2, 3],                       # original
        [1, 7, 3], [7, 2, 3],            # delete hi, lo
        [1, 5, 3], [7, 2, 3],            # swap hi (candidate 1), lo (none: filler)
        [1, 9, 3], [9, 2, 3],            # unk hi, lo
    ])


def test_divisor_at_most():
    from factor_jax.diagnostics import divisor_at_most
    assert divisor_at_most(12, 5) == 4 and divisor_at_most(7, 100) == 7
    assert divisor_at_most(7, 3) == 1


# ------------------------------------------------------------------ choice tokens

def _choice_reference(actions, cands, legal, token_mask):
    """Brute force: token j is a choice iff the legal candidates sharing y_<j have more
    than one distinct token at j."""
    out = np.zeros(token_mask.shape, bool)
    for idx in np.ndindex(token_mask.shape[:-1]):
        y = actions[idx]
        for j in range(y.shape[0]):
            nxt = {int(c[j]) for c, ok in zip(cands[idx], legal[idx])
                   if ok and np.array_equal(c[:j], y[:j])}
            out[idx + (j,)] = token_mask[idx + (j,)] and len(nxt) > 1
    return out


def test_choice_tokens_hand_case():
    # Candidates (EOS = 1, PAD = 0): "5 7", "5 8", "6", "5 7 9" (illegal).
    cands = jnp.array([[[5, 7, 1, 0], [5, 8, 1, 0], [6, 1, 0, 0], [5, 7, 9, 1]]])
    legal = jnp.array([[True, True, True, False]])
    act = cands[:, 0]
    mask = act != 0
    # 5: vs 6 (a choice); 7: vs 8 (a choice); EOS: "5 7 9" is illegal (forced).
    np.testing.assert_array_equal(fj.choice_tokens(act, cands, legal, mask),
                                  [[True, True, False, False]])
    legal = legal.at[0, 3].set(True)   # now EOS vs 9 is a choice too
    np.testing.assert_array_equal(fj.choice_tokens(act, cands, legal, mask),
                                  [[True, True, True, False]])
    only = jnp.array([[True, False, False, False]])   # a single legal candidate
    assert not np.any(fj.choice_tokens(act, cands, only, mask))
    masked = mask.at[0, 1].set(False)   # never outside token_mask
    assert not fj.choice_tokens(act, cands, legal, masked)[0, 1]


@given(st.integers(0, 2**31 - 1))
def test_choice_tokens_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, k, a = 6, 5, 4
    cands = rng.integers(2, 5, size=(n, k, a)).astype(np.int32)   # small vocab: shared prefixes
    lens = rng.integers(1, a + 1, size=(n, k))
    cands = np.where(np.arange(a) < lens[..., None], cands, 0)
    legal = rng.random((n, k)) < 0.7
    legal[:, 0] = True
    act = cands[:, 0]
    mask = act != 0
    got = np.asarray(jax.jit(fj.choice_tokens)(act, cands, legal, mask))
    np.testing.assert_array_equal(got, _choice_reference(act, cands, legal, mask))


# ------------------------------------------------------------------ (b) TAC's coordinate

# Two groups of K = 2 episodes of 3, 2, 3 and 1 turns.
TURNS = jnp.array([[True, True, True], [True, True, False], [True, True, True],
                   [True, False, False]])
# The mean outcome of the rollouts from each x_t, t >= 1 (read where the turn is real).
P_MC = jnp.array([[0.0, 0.7, 0.9], [0.0, 0.4, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])
# (reward rule, G, the environment's rewards, its return to go from x_t) per analogue:
# household: success at the end only (the return to go is the outcome); shop: the score
# at the end, the second group's scores equal (sigma = 0: A_seq = 0); science: progress
# rewards before the end, the last turn's reward is success plus progress.
ANALOGUES = {
    "household": ("leave_one_out", [1.0, 0.0, 0.0, 1.0],
                  [[0, 0, 1], [0, 0, 0], [0, 0, 0], [1, 0, 0]], P_MC),
    "shop": ("standardise", [0.8, 0.2, 0.5, 0.5],
             [[0, 0, 0.8], [0, 0.2, 0], [0, 0, 0.5], [0.5, 0, 0]], P_MC),
    "science": ("raw", [1.0, 0.0, 1.0, 0.0],
                [[0.1, 0.2, 1.1], [0.1, 0.0, 0], [0.0, 0.3, 0.25], [0.0, 0, 0]],
                P_MC + jnp.array([[0, 0.3, 0.1], [0, 0, 0], [0, 0.55, 0.25], [0, 0, 0]])),
}


def _exact_critic(rule, g, p):
    """What the critic predicts at x_t, written out: the outcome in the reward coordinate
    of the trajectory's group (numpy, independent of factor_jax.continuations)."""
    g, p = np.asarray(g, np.float64).reshape(2, 2), np.asarray(p, np.float64).reshape(2, 2, 3)
    if rule != "standardise":
        return p.reshape(4, 3)
    mu, sd = g.mean(1)[:, None, None], g.std(1)[:, None, None]
    return np.where(sd < 1e-6, 0.0, (p - mu) / (sd + 1e-8)).reshape(4, 3)


def _tac(rule, g, env_rewards, values):
    """TAC's credit as FACTOR computes it (factor_jax.methods.factor_pieces)."""
    terminal, _, baseline = fj.reward_construction(g, 2, rule)
    r = fj.tac_rewards(env_rewards, terminal, TURNS, "keep")
    return r, baseline, fj.tac_credit(r, values, baseline, TURNS)


def test_an_exact_critic_equals_the_reference_in_every_coordinate():
    """A critic equal to V_MC (the expected target in the reward coordinate) gives TAC's
    credit A* = A^MC exactly (r 1) in every analogue's coordinate; the earlier reference
    (the environment's return to go and rewards) equals it on household only."""
    for name, (rule, g, rew, ret) in ANALOGUES.items():
        g, rew = jnp.asarray(g), jnp.asarray(rew, jnp.float32)
        values = jnp.asarray(_exact_critic(rule, g, P_MC), jnp.float32)
        r, baseline, credit = _tac(rule, g, rew, values)
        ref = fj.mc_references(r, rew, baseline, g, TURNS, P_MC, jnp.ones_like(TURNS),
                               ret, 2, rule, 8)
        np.testing.assert_allclose(ref["a_mc"], credit, atol=1e-5, err_msg=name)
        m = fj.calibration_metrics(credit, ref["a_mc"], TURNS)
        np.testing.assert_allclose(m["corr"], 1.0, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(m["rmse"], 0.0, atol=1e-5, err_msg=name)
        assert not np.any(ref["unscored"])
        gap = np.max(np.abs(np.asarray(ref["a_mc_env"] - credit)))
        if name == "household":
            assert gap < 1e-6
        else:
            assert gap > 0.1, name


def test_shop_reference_hand_counted():
    """Group 0: G = (0.8, 0.2), mu 0.5, sigma 0.3, A_seq = (1, -1). Episode 0 (3 turns):
    V(x_1) = (0.7 - 0.5) / 0.3 = 2/3, V(x_2) = 4/3; A^MC = (2/3, 2/3, 1 - 4/3), summing to
    A_seq. Its noise bound at x_1: 0.7 x 0.3 / 8 / 0.3^2. Group 1 (sigma 0): all 0."""
    rule, g, rew, ret = ANALOGUES["shop"]
    g, rew = jnp.asarray(g), jnp.asarray(rew, jnp.float32)
    r, baseline, _ = _tac(rule, g, rew, jnp.zeros((4, 3)))
    ref = fj.mc_references(r, rew, baseline, g, TURNS, P_MC, jnp.ones_like(TURNS), ret,
                           2, rule, 8, outcome_var=jnp.full((4, 3), 0.01))
    np.testing.assert_allclose(ref["a_mc"][0], [2 / 3, 2 / 3, -1 / 3], rtol=1e-5)
    np.testing.assert_allclose(ref["var_est"][0], [0.0, 0.01 / 0.09, 0.01 / 0.09], rtol=1e-4)
    np.testing.assert_allclose(ref["v_mc"][1], [0.0, (0.4 - 0.5) / 0.3, 0.0], rtol=1e-5)
    np.testing.assert_allclose(ref["var"][0, 1], 0.7 * 0.3 / 8 / 0.09, rtol=1e-4)
    np.testing.assert_allclose(ref["var_env"][0, 1], 0.7 * 0.3 / 8, rtol=1e-5)
    assert np.all(np.asarray(ref["a_mc"][2:]) == 0.0) and np.all(ref["var"][2:] == 0.0)
    # the environment's coordinate: raw scores, the environment's rewards
    np.testing.assert_allclose(ref["a_mc_env"][0], [0.7, 0.2, 0.8 - 0.9], rtol=1e-5)


def test_unscored_states_take_the_trajectory_outcome_as_the_critic_target_does():
    rule, g, rew, ret = ANALOGUES["science"]
    g, rew = jnp.asarray(g), jnp.asarray(rew, jnp.float32)
    r, baseline, _ = _tac(rule, g, rew, jnp.zeros((4, 3)))
    scored = jnp.ones_like(TURNS).at[0, 2].set(False)
    ref = fj.mc_references(r, rew, baseline, g, TURNS, P_MC, scored, ret, 2, rule, 8)
    assert float(ref["v_mc"][0, 2]) == 1.0 and float(ref["var"][0, 2]) == 0.0
    np.testing.assert_array_equal(ref["unscored"], ~scored & TURNS)


@settings(max_examples=examples(20), deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(fj.REWARD_RULES))
def test_exact_critic_matches_the_reference_for_any_outcomes(seed, rule):
    rng = np.random.default_rng(seed)
    g = jnp.asarray(rng.random(4), jnp.float32)
    rew = jnp.asarray(rng.random((4, 3)), jnp.float32)
    p = jnp.asarray(rng.random((4, 3)), jnp.float32)
    values = jnp.asarray(_exact_critic(rule, g, p), jnp.float32)
    r, baseline, credit = _tac(rule, g, rew, values)
    ref = fj.mc_references(r, rew, baseline, g, TURNS, p, jnp.ones_like(TURNS), p, 2, rule, 8)
    np.testing.assert_allclose(ref["a_mc"], credit, atol=1e-4)


def test_state_outcomes_are_the_critic_continuations_and_the_earlier_v_mc():
    """From the same keys: the return to go is mc_state_values' V_MC; the outcome is the
    mean of the critic's continuations (continuation_outcomes) at that horizon, unscored
    when no rollout ends within it."""
    from asct_jax.envs.toy_tree import ToyTree
    from asct_jax.search.rollout_value import mc_return
    from factor_jax.continuations import continuation_outcomes

    env = ToyTree(num_actions=3, depth=3)
    params = env.make_params(seed=1, early_stop_prob=0.0)   # episodes of 3 turns
    pi = env.policy_fn(params, jnp.zeros((env.num_nodes, env.num_actions)))
    s0, _ = env.reset(jax.random.key(0), params)
    cands, legal = env.legal_actions(s0, params)
    s1, ts = env.step(s0, cands[int(np.argmax(np.asarray(legal)))], params)
    states = jax.tree.map(lambda a, b: jnp.stack([a, b]), s0, s1)
    keys = jax.random.split(jax.random.key(5), 2)
    prefix = jnp.array([0.0, float(ts.reward)])
    v = fj.mc_state_values(env, params, pi, states, keys, 6, 2)
    for horizon, key in ((env.max_turns, "return"), (env.max_turns, "success"), (1, "score")):
        so = fj.mc_state_outcomes(env, params, pi, states, keys, prefix, 6, horizon, key, 2)
        np.testing.assert_allclose(so.ret, v, rtol=1e-6)
        for n in range(2):
            state = jax.tree.map(lambda x: x[n], states)
            mean, any_ended, _, _ = continuation_outcomes(env, params, state, pi, keys[n], 6,
                                                          horizon, key, prefix[n])
            np.testing.assert_allclose(so.outcome[n], mean, rtol=1e-5, atol=1e-6)
            assert bool(so.scored[n]) == bool(any_ended)
            if key == "return":   # outcome = prefix + return to go: the rollouts' s^2 / M
                rets = np.asarray(mc_return(env, params, state, pi, keys[n], 6)[1])
                np.testing.assert_allclose(so.outcome_var[n], rets.var(ddof=1) / 6,
                                           rtol=1e-4, atol=1e-7)
    assert not np.any(fj.mc_state_outcomes(env, params, pi, states, keys, prefix, 6, 1,
                                           "return", 2).scored[:1])   # depth 3: not in 1
