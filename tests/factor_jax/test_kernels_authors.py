"""The kernels that follow the FACTOR authors' code: their unit tests' hand-worked numbers
(re-derived here, in our layout), and properties.

Layout: B episodes, T turns, A token slots per turn; the authors' flat token streams with
action spans map to one action per turn, non-action tokens in any free slot (the
aggregations are over the whole batch, so where they sit does not matter).

Not named after a module: the authors' kernels span factor_jax's apm, hta, tac, serl,
schedules and losses (all exported by factor_jax), checked together against the authors'
numbers.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import factor_jax as fj
from factor_jax.synthetic import masks_from_lengths, pad_batch

B, T, A = 3, 5, 6
PROPS = settings(max_examples=30, deadline=None)



def hta_weights(delta, credit, mask, eta, tau=1.0, clip_d=3.0):
    """FACTOR's token weights as the method computes them: APM of the HTA scores."""
    return fj.apm_weights(fj.hta_scores(delta, credit, mask, clip_d), mask, eta, tau=tau)


hta = jax.jit(hta_weights, static_argnames=("tau", "clip_d"))
policy_loss = jax.jit(fj.factor_policy_loss, static_argnames="clip_eps")
serl_mult = jax.jit(fj.serl_token_weights, static_argnames="clip")
serl_coef = jax.jit(fj.serl_coefficients, static_argnames="clip")
checkpoints = jax.jit(fj.checkpoint_turns)
warmup = jax.jit(fj.warmup_credit)
construct = jax.jit(fj.reward_construction, static_argnums=(1, 2))


def f32(x):
    return jnp.asarray(x, jnp.float32)


def _masks(rng, turns=None, min_len=0):
    """turn_mask [B, T], token_mask [B, T, A] with per-action lengths in [min_len, A]."""
    if turns is None:
        turns = rng.integers(0, T + 1, size=B)
    lengths = rng.integers(min_len, A + 1, size=(B, T))
    return masks_from_lengths(turns, lengths, T, A)


# ============================================================ reward construction

def test_rewards_leave_one_out_hand_case():
    g = f32([1, 1, 0, 0])  # one group of K = 4, sum 2: b_i = (2 - G_i) / 3
    terminal, a_seq, base = fj.reward_construction(g, 4, "leave_one_out")
    b = (2.0 - np.array([1, 1, 0, 0])) / 3.0
    np.testing.assert_allclose(base, b, rtol=1e-6)
    np.testing.assert_allclose(a_seq, np.array([1, 1, 0, 0]) - b, rtol=1e-6)
    np.testing.assert_array_equal(terminal, g)  # the raw success is the terminal reward
    # K = 1: no baseline.
    terminal, a_seq, base = fj.reward_construction(f32([1, 0]), 1, "leave_one_out")
    np.testing.assert_array_equal(base, 0.0)
    np.testing.assert_array_equal(a_seq, [1, 0])


def test_rewards_standardise_hand_case():
    scores = np.array([0.5, 0.7, 0.9, 0.1])
    terminal, a_seq, base = fj.reward_construction(f32(scores), 4, "standardise")
    expected = (scores - scores.mean()) / (scores.std() + 1e-8)  # population std
    np.testing.assert_allclose(a_seq, expected, rtol=1e-5)
    np.testing.assert_array_equal(terminal, a_seq)  # the terminal reward IS A_seq
    np.testing.assert_array_equal(base, 0.0)
    # sigma < 1e-6: A_seq = 0 for the whole group (the other group is untouched).
    g = f32([0.42, 0.42, 0.42, 0.42, 0.0, 1.0, 0.0, 1.0])
    _, a_seq, _ = fj.reward_construction(g, 4, "standardise")
    np.testing.assert_array_equal(a_seq[:4], 0.0)
    np.testing.assert_allclose(a_seq[4:], [-1, 1, -1, 1], rtol=1e-6)


def test_rewards_raw_hand_case():
    g = f32([1, 0, 1, 0])
    terminal, a_seq, base = fj.reward_construction(g, 4, "raw")
    np.testing.assert_array_equal(a_seq, g)
    np.testing.assert_array_equal(terminal, g)
    np.testing.assert_array_equal(base, 0.0)


def test_rewards_bad_arguments():
    with pytest.raises(ValueError, match="rule.*leave_one_out.*standardise.*raw"):
        fj.reward_construction(f32([1, 0]), 2, "alfworld")
    with pytest.raises(ValueError, match="group_size"):
        fj.reward_construction(f32([1, 0, 1]), 2, "raw")


def test_rewards_jit_and_telescoping_with_tac():
    """A TAC credit built on the construction sums to A_seq plus the step rewards before the
    last turn for every rule (the trainer's rewards = action_rewards; rewards[-1] =
    terminal; V~(x_0) = baseline); to A_seq without step rewards."""
    rng = np.random.default_rng(0)
    g = f32(rng.random(8))
    turn_mask, _ = masks_from_lengths([3, 1, 5, 2, 4, 5, 1, 3], np.ones((8, T), int), T, 1)
    last = np.arange(T)[None, :] == turn_mask.sum(-1)[:, None] - 1
    values = f32(rng.normal(size=(8, T)))
    env_r = f32(rng.normal(size=(8, T)))
    steps = np.where(turn_mask & ~last, env_r, 0.0).sum(-1)
    for rule in fj.REWARD_RULES:
        terminal, a_seq, base = construct(g, 4, rule)
        mask = jnp.asarray(turn_mask)
        for mode, extra in (("keep", steps), ("zero", 0.0)):
            rewards = fj.tac_rewards(env_r, terminal, mask, mode)
            credit = fj.tac_credit(rewards, values, base, mask)
            np.testing.assert_allclose(credit.sum(-1), a_seq + extra, atol=1e-5)


@PROPS
@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 2, 3, 4, 8]), st.integers(1, 3),
       st.booleans())
def test_rewards_group_identities(seed, k, groups, binary):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 2, size=groups * k) if binary else rng.normal(size=groups * k)
    g = np.asarray(g, np.float32)
    gg = g.reshape(groups, k).astype(np.float64)
    _, a_std, _ = construct(f32(g), k, "standardise")
    sums = np.asarray(a_std, np.float64).reshape(groups, k).sum(-1)
    np.testing.assert_allclose(sums, 0.0, atol=1e-4)  # also 0 for a degenerate group
    terminal, a_loo, base = construct(f32(g), k, "leave_one_out")
    if k > 1:  # a_seq = (K / (K - 1)) (G - mean)
        expected = k / (k - 1) * (gg - gg.mean(-1, keepdims=True))
        np.testing.assert_allclose(np.asarray(a_loo).reshape(groups, k), expected,
                                   atol=1e-5)
    np.testing.assert_allclose(np.asarray(terminal) - np.asarray(base), a_loo, atol=1e-6)


# ============================================================ schedules

def test_eta_schedule_hand_case():
    for k in (0, 1, 10, 50, 100):
        assert float(fj.eta_schedule(k)) == 0.0  # warm-up, and inactive from step 50
    np.testing.assert_allclose(fj.eta_schedule(11), 0.7 * (1 - 11 / 50), rtol=1e-6)  # 0.546
    np.testing.assert_allclose(fj.eta_schedule(20), 0.42, rtol=1e-6)
    assert float(fj.eta_schedule(49)) > 0.0
    jitted = jax.jit(fj.eta_schedule)
    np.testing.assert_allclose(jitted(jnp.int32(11)), 0.546, rtol=1e-6)
    assert float(jitted(jnp.int32(10))) == 0.0 and float(jitted(jnp.int32(50))) == 0.0
    # A short run's window: eta0 (1 - k / decay) on [start, end] only.
    np.testing.assert_allclose(fj.eta_schedule(3, eta0=1.0, start=3, end=9, decay=10), 0.7,
                               rtol=1e-6)
    assert float(fj.eta_schedule(10, eta0=1.0, start=3, end=12, decay=10)) == 0.0


def test_kl_schedule_hand_case():
    np.testing.assert_allclose(fj.kl_schedule(20), 0.6, rtol=1e-6)  # lambda_20 = 1 - 20/50
    np.testing.assert_allclose(fj.kl_schedule(1), 0.98, rtol=1e-6)
    np.testing.assert_allclose(fj.kl_schedule(0), 0.98, rtol=1e-6)  # max(step, 1)
    assert float(fj.kl_schedule(50)) == 0.0 and float(fj.kl_schedule(80)) == 0.0
    np.testing.assert_allclose(jax.jit(fj.kl_schedule)(jnp.int32(25)), 0.5, rtol=1e-6)


def test_scale_steps_hand_case():
    assert [fj.scale_steps(n, 150) for n in (10, 11, 49, 50)] == [10, 11, 49, 50]
    assert [fj.scale_steps(n, 75) for n in (10, 11, 49, 50)] == [5, 6, 25, 25]
    assert [fj.scale_steps(n, 30) for n in (10, 11, 49, 50)] == [2, 2, 10, 10]
    assert fj.scale_steps(10, 3) == 1 and fj.scale_steps(0, 75) == 0
    assert fj.scale_steps(50, 300) == 100
    for bad in (dict(n=-1, steps=10), dict(n=10, steps=0), dict(n=1.5, steps=10)):
        with pytest.raises(ValueError):
            fj.scale_steps(**bad)


@PROPS
@given(st.integers(0, 100), st.integers(1, 400), st.integers(1, 300))
def test_scale_steps_rounds(n, steps, reference):
    got = fj.scale_steps(n, steps, reference)
    assert isinstance(got, int)
    exact = n * steps / reference
    assert fj.scale_steps(n, reference, reference) == n
    if n >= 1:
        assert got >= 1
        assert got == 1 or abs(got - exact) <= 0.5
    else:
        assert got == 0


@PROPS
@given(st.integers(1, 200))
def test_schedules_bounds(k):
    eta = float(fj.eta_schedule(k))
    assert 0.0 <= eta <= 0.7 and (eta > 0) == (11 <= k <= 49)
    lam = float(fj.kl_schedule(k))
    assert 0.0 <= lam < 1.0 and (lam > 0) == (k < 50)
    s = float(fj.serl_lambda(k))
    assert 0.0 <= s <= 0.5 and (s > 0) == (k < 51)


# ============================================================ hta_scores -> apm_weights

def _one_action(gaps, credit, eta, tau=1.0, clip_d=3.0):
    gaps = f32(gaps)[None, None]
    mask = jnp.ones(gaps.shape, bool)
    return np.asarray(hta(gaps, f32([[credit]]), mask, eta, tau=tau, clip_d=clip_d))[0, 0]


def _softmax(x):
    e = np.exp(np.asarray(x, np.float64) - np.max(x))
    return e / e.sum()


def test_hta_outcome_scores_hand_case():
    """s = sign(A*) clip(delta, -3, 3): delta (0.5, -5, 10) -> (0.5, -3, 3) for A* > 0, the
    negation for A* < 0, 0 (uniform) for A* = 0. At eta = 1, omega = L softmax(s)."""
    gaps = [0.5, -5.0, 10.0]
    np.testing.assert_allclose(_one_action(gaps, 2.0, 1.0), 3 * _softmax([0.5, -3, 3]),
                               rtol=1e-5)
    np.testing.assert_allclose(_one_action(gaps, -2.0, 1.0), 3 * _softmax([-0.5, 3, -3]),
                               rtol=1e-5)
    np.testing.assert_allclose(_one_action(gaps, 0.0, 1.0), 1.0, rtol=1e-6)
    # The raw gap is not clipped (the clip lives in the score).
    np.testing.assert_allclose(fj.hindsight_delta(f32([[[5.0]]]), f32([[[-5.0]]]),
                                                  jnp.ones((1, 1, 1), bool)), 10.0)
    np.testing.assert_allclose(
        fj.hindsight_delta(f32([[[0.0, -1.0, -2.0]]]), f32([[[-0.5, -1.5, -2.5]]]),
                           jnp.ones((1, 1, 3), bool)), 0.5)
    # rho = (1 - eta) / L + eta softmax: eta = 0.5 by hand.
    rho = 0.5 / 3 + 0.5 * _softmax([0.5, -3, 3])
    np.testing.assert_allclose(_one_action(gaps, 2.0, 0.5), 3 * rho, rtol=1e-5)


def test_hta_allocation_direction_and_sharpness():
    pos, neg = _one_action([2.0, -2.0], 1.0, 1.0), _one_action([2.0, -2.0], -1.0, 1.0)
    assert pos[0] > pos[1]  # A* > 0: the highest-gap token gets the most credit
    assert neg[1] > neg[0]  # A* < 0: the lowest-gap token bears the most blame
    low, high = _one_action([2.0, 0, 0, 0], 1.0, 0.2), _one_action([2.0, 0, 0, 0], 1.0, 0.7)
    assert high[0] > low[0]
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(_one_action(rng.normal(size=5), 1.0, 0.0), 1.0)
    for eta in (0.1, 0.5, 0.7):  # mean one per action, rho sums to one
        for n in (8, 3):
            w = _one_action(rng.normal(size=n), 1.0, eta)
            assert abs(w.mean() - 1.0) < 1e-5 and abs((w / n).sum() - 1.0) < 1e-5


def test_hta_dense_hand_case():
    """The authors' dense builder case: two 3-token actions with credits (1, -1), one
    gap 1 in the first, -1 in the second, step 20 (eta = 0.42); a padded slot stays 0."""
    delta = f32([[[1.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0]]])
    mask = jnp.array([[[True, True, True, False]] * 2])
    w = np.asarray(hta(delta, f32([[1.0, -1.0]]), mask, fj.eta_schedule(20)))
    np.testing.assert_array_equal(w[..., 3], 0.0)
    np.testing.assert_allclose(w[..., :3].mean(-1), 1.0, atol=1e-6)
    # Negative credit: the low-gap token gets the larger multiplier (eta0 = 1 at step 20).
    delta = f32([[[2.0, -2.0, 0.0]]])
    w = np.asarray(hta(delta, f32([[-1.0]]), jnp.ones((1, 1, 3), bool),
                       fj.eta_schedule(20, eta0=1.0)))
    assert w[0, 0, 1] > w[0, 0, 0]


def test_hta_traced_eta_and_empty_actions():
    mask = jnp.zeros((1, 2, 3), bool).at[0, 0, :2].set(True)
    delta = f32(np.full((1, 2, 3), np.nan)).at[0, 0, :2].set(jnp.array([1.0, -1.0]))
    w = jax.jit(lambda e: hta_weights(delta, f32([[1.0, 1.0]]), mask, e))(0.5)
    np.testing.assert_allclose(np.asarray(w)[0, 0, :2].mean(), 1.0, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(w)[0, 0, 2], 0.0)
    np.testing.assert_array_equal(np.asarray(w)[0, 1], 0.0)  # no mask token: 0
    with pytest.raises(ValueError, match="eta"):
        hta_weights(delta, f32([[1.0, 1.0]]), mask, 1.5)


@PROPS
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 0.99), st.sampled_from([0.5, 1.0, 2.0]),
       st.sampled_from([1e-3, 1.0, 30.0]))
def test_hta_weight_properties(seed, eta, tau, scale):
    rng = np.random.default_rng(seed)
    turn_mask, mask = _masks(rng)
    delta = f32(scale * rng.normal(size=(B, T, A)))
    credit = rng.normal(size=(B, T))
    credit[rng.random((B, T)) < 0.3] = 0.0
    credit = f32(credit)
    w = np.asarray(hta(delta, credit, jnp.asarray(mask), eta, tau=tau), np.float64)
    length = mask.sum(-1)
    mean = w.sum(-1) / np.maximum(length, 1)
    np.testing.assert_allclose(mean[length > 0], 1.0, atol=2e-6)
    np.testing.assert_array_equal(w[~mask], 0.0)
    assert np.all(w[mask] >= 1.0 - eta - 1e-5)
    flat = mask & (np.asarray(credit) == 0)[..., None]  # A* = 0: uniform
    np.testing.assert_allclose(w[flat], 1.0, atol=1e-6)
    coef = np.asarray(credit)[..., None] * w
    np.testing.assert_array_equal(np.sign(coef[mask]),
                                  np.sign(np.broadcast_to(np.asarray(credit)[..., None],
                                                          mask.shape)[mask]))
    w0 = np.asarray(hta(delta, credit, jnp.asarray(mask), 0.0, tau=tau))
    np.testing.assert_array_equal(w0[mask], 1.0)  # eta = 0: exactly uniform
    # Padding (nan) changes nothing.
    p = pad_batch({"delta": np.asarray(delta), "turn_mask": turn_mask, "token_mask": mask},
                  1, 2, rng, garbage=np.nan)
    credit_p = jnp.pad(credit, ((0, 0), (0, 1)), constant_values=jnp.nan)
    w_p = np.asarray(hta(f32(p["delta"]), credit_p, jnp.asarray(p["token_mask"]), eta,
                         tau=tau))
    np.testing.assert_array_equal(w_p[:, :T, :A], np.asarray(
        hta(f32(np.where(mask, delta, 0)), credit, jnp.asarray(mask), eta, tau=tau)))
    assert not np.any(w_p[:, T:]) and not np.any(w_p[..., A:])


# ============================================================ warm-up credit

def test_warmup_credit_hand_case():
    """ALFWorld group (1, 0), K = 2: b = (0, 1), A_seq = (1, -1); two actions each ->
    A* = A_seq / 2 on every action."""
    _, a_seq, _ = fj.reward_construction(f32([1.0, 0.0]), 2, "leave_one_out")
    np.testing.assert_allclose(a_seq, [1.0, -1.0])
    turn_mask = jnp.array([[True, True, False], [True, True, False]])
    np.testing.assert_allclose(warmup(a_seq, turn_mask), [[0.5, 0.5, 0], [-0.5, -0.5, 0]])
    empty = warmup(f32([jnp.nan, 2.0]), jnp.array([[False] * 3, [True, False, False]]))
    np.testing.assert_array_equal(empty, [[0, 0, 0], [2.0, 0, 0]])


@PROPS
@given(st.integers(0, 2**31 - 1))
def test_warmup_credit_sums_to_a_seq(seed):
    rng = np.random.default_rng(seed)
    turns = rng.integers(0, T + 1, size=B)
    turn_mask = np.arange(T)[None, :] < turns[:, None]
    a_seq = f32(rng.normal(size=B))
    c = np.asarray(warmup(a_seq, jnp.asarray(turn_mask)))
    np.testing.assert_allclose(c.sum(-1), np.where(turns > 0, a_seq, 0.0), atol=1e-6)
    np.testing.assert_array_equal(c[~turn_mask], 0.0)
    live = turn_mask & (turns > 0)[:, None]
    np.testing.assert_allclose(c[live], np.broadcast_to(
        (np.asarray(a_seq) / np.maximum(turns, 1))[:, None], turn_mask.shape)[live], rtol=1e-6)


# ============================================================ checkpoint turns

def _turn_mask(lengths, width):
    return jnp.arange(width)[None, :] < jnp.asarray(lengths)[:, None]


def test_checkpoint_turns_hand_cases():
    # 1 < T < 4: the midpoint T // 2 (T = 3 -> 1, T = 2 -> 1); T <= 1: none.
    idx, valid = checkpoints(_turn_mask([3, 2, 1, 0], 6), jax.random.PRNGKey(0))
    np.testing.assert_array_equal(idx, [[1, 0], [1, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(valid, [[True, False], [True, False], [False, False],
                                          [False, False]])
    # T >= 4: one in [0, T // 2), one in [T // 2, T), for T = 4, 5, 8, 17, 50; 25 draws.
    lengths = np.repeat(np.array([4, 5, 8, 17, 50]), 25)  # one batch of 25 copies each
    mask = _turn_mask(lengths, 50)
    idx, valid = checkpoints(mask, jax.random.PRNGKey(1))
    idx, valid = np.asarray(idx), np.asarray(valid)
    assert valid.all()
    half = lengths // 2
    assert np.all(idx[..., 0] >= 0) and np.all(idx[..., 0] < half)
    assert np.all(idx[..., 1] >= half) and np.all(idx[..., 1] < lengths)
    # Odd T = 5 splits {0, 1} | {2, 3, 4}; every turn of each half is drawn.
    five = idx[lengths == 5]
    assert set(five[:, 0]) == {0, 1} and set(five[:, 1]) == {2, 3, 4}
    # Reproducible from the key, different for another.
    np.testing.assert_array_equal(checkpoints(mask, jax.random.PRNGKey(1))[0], idx)
    assert np.any(np.asarray(checkpoints(mask, jax.random.PRNGKey(2))[0]) != idx)


@PROPS
@given(st.integers(0, 2**31 - 1))
def test_checkpoint_turns_properties(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 12, size=8)
    idx, valid = checkpoints(_turn_mask(lengths, 11), jax.random.PRNGKey(seed))
    idx, valid = np.asarray(idx), np.asarray(valid)
    assert idx.dtype == np.int32 and idx.shape == valid.shape == (8, 2)
    np.testing.assert_array_equal(valid[:, 0], lengths > 1)
    np.testing.assert_array_equal(valid[:, 1], lengths >= 4)
    np.testing.assert_array_equal(idx[~valid], 0)
    half = lengths // 2
    long, short = lengths >= 4, (lengths > 1) & (lengths < 4)
    assert np.all(idx[long, 0] < half[long]) and np.all(idx[long, 1] >= half[long])
    assert np.all(idx[long, 1] < lengths[long])
    np.testing.assert_array_equal(idx[short, 0], half[short])


# ============================================================ factor_policy_loss

def _ppo_fixture():
    """The authors' two-trajectory case at q = 1, laid out as [B=2, T=2, A=5]:
    episode 0: actions of 2 and 2 tokens with C = (1, 1) and (0.5, 0.5), then 3 non-action
    tokens; episode 1: one 3-token action with C = 0, then 2 non-action tokens.
    ALFWorld group (1, 0) gives A_seq = (1, -1)."""
    act = np.zeros((2, 2, 5), bool)
    non = np.zeros((2, 2, 5), bool)
    coef = np.zeros((2, 2, 5), np.float32)
    act[0, 0, :2] = act[0, 1, :2] = act[1, 0, :3] = True
    non[0, 1, 2:5] = non[1, 0, 3:5] = True
    coef[0, 0, :2], coef[0, 1, :2] = 1.0, 0.5
    _, a_seq, _ = fj.reward_construction(f32([1.0, 0.0]), 2, "leave_one_out")
    return jnp.asarray(act), jnp.asarray(non), f32(coef), a_seq


def test_policy_loss_authors_fixture():
    act, non, coef, a_seq = _ppo_fixture()
    zeros = jnp.zeros(act.shape, jnp.float32)
    out = policy_loss(zeros, zeros, coef, a_seq, act, non, clip_eps=0.2)
    # L_act = -(mean(1, 1) + mean(.5, .5) + mean(0, 0, 0)) / 3 = -0.5
    np.testing.assert_allclose(out["act"], -0.5, rtol=1e-6)
    assert float(out["num_actions"]) == 3
    # L_nonact = -(1 * 3 + (-1) * 2) / 5 = -0.2
    np.testing.assert_allclose(out["nonact"], -0.2, rtol=1e-6)
    assert float(out["num_nonact_tokens"]) == 5
    np.testing.assert_allclose(out["act"] + out["nonact"], -0.7, rtol=1e-6)
    assert float(out["clip_frac"]) == 0.0 and abs(float(out["approx_kl"])) < 1e-7


def test_policy_loss_weighs_actions_equally():
    """A 4-token action with C = 0.25 and a 1-token one with C = 1: -(0.25 + 1) / 2, not
    the token mean -(0.25 * 4 + 1) / 5 = -0.4; no non-action token: L_nonact = 0."""
    act = jnp.zeros((1, 2, 4), bool).at[0, 0].set(True).at[0, 1, 0].set(True)
    coef = jnp.where(act, f32([[[0.25] * 4, [1.0, 0, 0, 0]]]), 0.0)
    zeros = jnp.zeros(act.shape, jnp.float32)
    out = policy_loss(zeros, zeros, coef, f32([1.0]), act, jnp.zeros_like(act), clip_eps=0.2)
    np.testing.assert_allclose(out["act"], -0.625, rtol=1e-6)
    assert float(out["nonact"]) == 0.0
    none = policy_loss(zeros, zeros, coef, f32([1.0]), jnp.zeros_like(act),
                       jnp.zeros_like(act), clip_eps=0.2)
    assert float(none["act"]) == 0.0 and float(none["nonact"]) == 0.0


def test_policy_loss_clipped_hand_case():
    eps = 0.2
    act = jnp.array([[[True, True]]])
    non = jnp.array([[[False, False]]])
    coef = f32([[[2.0, -1.0]]])
    logp_old = f32([[[-1.0, -1.0]]])
    logp = logp_old + f32([[[0.5, -0.5]]])  # q = (e^.5, e^-.5): both clipped here
    out = policy_loss(logp, logp_old, coef, f32([0.0]), act, non, clip_eps=eps)
    expected = -(min(math.exp(0.5) * 2, 1.2 * 2) + min(math.exp(-0.5) * -1, 0.8 * -1)) / 2
    np.testing.assert_allclose(out["act"], expected, rtol=1e-6)
    assert float(out["clip_frac"]) == 1.0


def _loss_batch(rng):
    turn_mask, token_mask = _masks(rng, min_len=1)
    split = rng.random(token_mask.shape) < 0.6
    act = token_mask & split
    non = token_mask & ~split
    logp_old = (-rng.exponential(size=token_mask.shape)).astype(np.float32)
    coef = rng.normal(size=token_mask.shape).astype(np.float32)
    a_seq = rng.normal(size=B).astype(np.float32)
    return turn_mask, token_mask, act, non, logp_old, coef, a_seq


def _total(logp, logp_old, coef, a_seq, act, non, eps=0.2):
    out = fj.factor_policy_loss(logp, logp_old, coef, a_seq, act, non, clip_eps=eps)
    return out["act"] + out["nonact"]


total_grad = jax.jit(jax.grad(_total))


@PROPS
@given(st.integers(0, 2**31 - 1))
def test_policy_loss_at_q_one(seed):
    rng = np.random.default_rng(seed)
    _, _, act, non, logp_old, coef, a_seq = _loss_batch(rng)
    out = policy_loss(f32(logp_old), f32(logp_old), f32(coef), f32(a_seq), jnp.asarray(act),
                      jnp.asarray(non), clip_eps=0.2)
    length = act.sum(-1)
    per_action = np.where(act, coef, 0).sum(-1)[length > 0] / length[length > 0]
    expected = -per_action.mean() if per_action.size else 0.0
    np.testing.assert_allclose(out["act"], expected, rtol=1e-5, atol=1e-6)
    a_tok = np.broadcast_to(a_seq[:, None, None], non.shape)[non]
    np.testing.assert_allclose(out["nonact"], -a_tok.mean() if a_tok.size else 0.0,
                               rtol=1e-5, atol=1e-6)


@PROPS
@given(st.integers(0, 2**31 - 1), st.sampled_from([np.nan, np.inf, -np.inf, None]))
def test_policy_loss_masks_mask(seed, garbage):
    rng = np.random.default_rng(seed)
    turn_mask, token_mask, act, non, logp_old, coef, a_seq = _loss_batch(rng)
    logp = (logp_old + 0.3 * rng.normal(size=logp_old.shape)).astype(np.float32)
    clean = {"logp": np.where(token_mask, logp, 0), "logp_old": np.where(token_mask, logp_old, 0),
             "coef": np.where(act, coef, 0), "turn_mask": turn_mask, "token_mask": token_mask}
    p = pad_batch(clean, 1, 2, rng, garbage=garbage)
    widths = [(0, 0), (0, 1), (0, 2)]
    act_p, non_p = np.pad(act, widths), np.pad(non, widths)
    # Garbage also on the live tokens of the *other* mask: coef off the action tokens.
    coef_p = np.where(non_p, np.float32(1e30), p["coef"])
    # An episode with no non-action token may carry a garbage A_seq.
    a_seq_p = np.where(non.any((1, 2)), a_seq, np.float32(np.nan))
    a_seq_c = np.where(non.any((1, 2)), a_seq, np.float32(0.0))
    args_c = (f32(clean["logp"]), f32(clean["logp_old"]), f32(clean["coef"]), f32(a_seq_c),
              jnp.asarray(act), jnp.asarray(non))
    args_p = (f32(p["logp"]), f32(p["logp_old"]), f32(coef_p), f32(a_seq_p),
              jnp.asarray(act_p), jnp.asarray(non_p))
    out_c = policy_loss(*args_c, clip_eps=0.2)
    out_p = policy_loss(*args_p, clip_eps=0.2)
    for name in out_c:
        np.testing.assert_allclose(out_p[name], out_c[name], rtol=1e-6, atol=1e-7)
    g_c, g_p = np.asarray(total_grad(*args_c)), np.asarray(total_grad(*args_p))
    assert np.all(np.isfinite(g_p))
    np.testing.assert_allclose(g_p[:, :T, :A], g_c, rtol=1e-6, atol=1e-8)
    assert not np.any(g_p[:, T:]) and not np.any(g_p[..., A:])
    assert not np.any(g_p[:, :T, :A][~token_mask])


# ============================================================ forward KL

def _log_softmax(x, axis=-1):
    return jax.nn.log_softmax(f32(x), axis=axis)


def test_forward_kl_full_vocabulary_hand_case():
    """Two-point distributions, logits (2, 0) vs (0, 2): KL = 2 tanh(1) (K = V = 2, one
    position)."""
    t = _log_softmax([[2.0], [0.0]], axis=0)  # [K=2, A=1]
    s = _log_softmax([[0.0], [2.0]], axis=0)
    kl = fj.forward_kl(t, s, jnp.ones((2, 1), bool))
    np.testing.assert_allclose(kl, [2 * math.tanh(1.0)], rtol=1e-6)


def test_forward_kl_identical_and_masked_means():
    rng = np.random.default_rng(0)
    v, n = 11, 5  # vocabulary, positions
    logits = rng.normal(size=(n, v))
    t = _log_softmax(logits).T  # [K=V, A=n]
    kl = fj.forward_kl(t, t, jnp.ones((v, n), bool))
    assert np.max(np.abs(kl)) < 1e-6
    teacher, student = _log_softmax(rng.normal(size=(4, 7))).T, _log_softmax(
        rng.normal(size=(4, 7))).T  # [K=7, A=4]
    kl = fj.forward_kl(teacher, student, jnp.ones((7, 4), bool))
    assert np.all(np.asarray(kl) >= 0)
    mask = jnp.array([[[True, False, True, False]]])  # [B=1, T=1, A=4]
    mean = fj.kl_token_mean(kl[None, None], mask)
    np.testing.assert_allclose(mean, (kl[0] + kl[2]) / 2, rtol=1e-6)
    assert float(fj.kl_token_mean(kl[None, None], jnp.zeros_like(mask))) == 0.0
    # With the kl schedule: L = L_act + L_nonact + lambda_20 * L_kl, lambda_20 = 0.6.
    np.testing.assert_allclose(fj.kl_schedule(20) * mean, 0.6 * (kl[0] + kl[2]) / 2,
                               rtol=1e-6)


def test_forward_kl_constrained_support():
    """Candidates' tokens: position 0 has 3 distinct allowed tokens (4 candidates, one a
    duplicate, masked off), position 1 a single allowed token (forced: KL 0). Garbage off
    the support changes nothing; the teacher gets no gradient."""
    p_t, p_s = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    t = np.full((4, 2), np.nan, np.float32)
    s = np.full((4, 2), np.inf, np.float32)
    t[:3, 0], s[:3, 0] = np.log(p_t), np.log(p_s)
    t[0, 1] = s[0, 1] = 0.0
    mask = np.zeros((4, 2), bool)
    mask[:3, 0] = True
    mask[0, 1] = True
    kl = fj.forward_kl(f32(t), f32(s), jnp.asarray(mask))
    np.testing.assert_allclose(kl, [np.sum(p_t * np.log(p_t / p_s)), 0.0], rtol=1e-6)
    g_t, g_s = jax.grad(lambda a, b: jnp.sum(fj.forward_kl(a, b, jnp.asarray(mask))),
                        argnums=(0, 1))(f32(t), f32(s))
    np.testing.assert_array_equal(g_t, 0.0)
    g_s = np.asarray(g_s)
    assert np.all(np.isfinite(g_s)) and not np.any(g_s[~mask])
    np.testing.assert_allclose(g_s[:3, 0], -p_t, rtol=1e-6)  # d/d log p_S = -p_T


@PROPS
@given(st.integers(0, 2**31 - 1))
def test_forward_kl_nonnegative_on_support(seed):
    rng = np.random.default_rng(seed)
    k = 5
    mask = rng.random((B, T, k, A)) < 0.6
    mask[..., 0, :] = True
    logits_t, logits_s = rng.normal(size=(2, B, T, k, A)) * 3

    def renorm(x):
        x = np.where(mask, x, -np.inf)
        return np.asarray(jax.nn.log_softmax(f32(x), axis=-2))

    kl = np.asarray(jax.jit(fj.forward_kl)(f32(renorm(logits_t)), f32(renorm(logits_s)),
                                           jnp.asarray(mask)))
    assert kl.shape == (B, T, A) and np.all(np.isfinite(kl)) and np.all(kl >= -1e-6)
    single = mask.sum(-2) == 1
    np.testing.assert_allclose(kl[single], 0.0, atol=1e-6)


# ============================================================ SERL

def test_serl_hand_case():
    adv = f32([1.5, -2.0])
    delta = f32([[[0.1, 0.5, -0.5, 30.0]], [[0.1, 0.5, -0.5, 30.0]]])
    act = jnp.array([[[True, True, False, False]], [[True, True, True, True]]])
    tok = jnp.array([[[True, True, True, False]], [[True, True, True, True]]])
    lam = 0.3
    # A > 0: w = clip(e^delta, .8, 1.2) = (e^.1, 1.2); token 2 is a reasoning token (1).
    # A < 0: w = clip(e^-delta) = (e^-.1, .8, 1.2, clip(e^-20) = .8).
    m0 = [0.7 + 0.3 * math.exp(0.1), 0.7 + 0.3 * 1.2, 1.0, 1.0]
    m1 = [0.7 + 0.3 * w for w in (math.exp(-0.1), 0.8, 1.2, 0.8)]
    np.testing.assert_allclose(serl_mult(delta, adv, act, lam), [[m0], [m1]], rtol=1e-6)
    expected = np.array([[[1.5 * m for m in m0[:3]] + [0.0]], [[-2.0 * m for m in m1]]])
    np.testing.assert_allclose(serl_coef(adv, delta, act, tok, lam), expected, rtol=1e-6)
    # lam = 0 is plain GRPO on every response token.
    np.testing.assert_allclose(serl_coef(adv, delta, act, tok, 0.0),
                               np.where(tok, np.asarray(adv)[:, None, None], 0.0))


@PROPS
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 1.0), st.sampled_from([0.0, 0.2, 0.5]))
def test_serl_multiplier_bounds(seed, lam, clip):
    rng = np.random.default_rng(seed)
    _, token_mask = _masks(rng, min_len=1)
    act = token_mask & (rng.random(token_mask.shape) < 0.5)
    delta = np.where(act, 10 * rng.normal(size=act.shape), np.nan).astype(np.float32)
    adv = f32(rng.normal(size=B))
    m = np.asarray(serl_mult(f32(delta), adv, jnp.asarray(act), lam, clip=clip))
    lo, hi = 1 - lam * clip - 1e-6, 1 + lam * clip + 1e-6
    assert np.all(m[act] >= lo) and np.all(m[act] <= hi)
    np.testing.assert_array_equal(m[~act], 1.0)
    c = np.asarray(serl_coef(adv, f32(delta), jnp.asarray(act), jnp.asarray(token_mask), lam,
                             clip=clip))
    np.testing.assert_array_equal(c[~token_mask], 0.0)
    np.testing.assert_allclose(c[token_mask], (np.asarray(adv)[:, None, None] * m)[token_mask],
                               rtol=1e-6)


def test_serl_lambda_schedule():
    # lam_k = 0.5 max(0, 1 - (k - 1) / 50), k 1-indexed: lam0 at the first update.
    for k, lam in [(1, 0.5), (11, 0.4), (26, 0.25), (51, 0.0), (80, 0.0), (0, 0.5)]:
        np.testing.assert_allclose(fj.serl_lambda(k), lam, atol=1e-7)
    np.testing.assert_allclose(jax.jit(fj.serl_lambda)(jnp.int32(26)), 0.25, atol=1e-7)
    np.testing.assert_allclose(fj.serl_lambda(6, lam0=1.0, decay_steps=10), 0.5, atol=1e-7)
    np.testing.assert_allclose(fj.serl_lambda(500, decay_steps=0), 0.5)  # SERL: no decay


# ============================================================ vmap over seeds

def test_kernels_vmap_over_a_seed_axis():
    rng = np.random.default_rng(3)
    s = 2
    masks = [_masks(rng, min_len=1) for _ in range(s)]
    turn_mask = jnp.asarray(np.stack([m[0] for m in masks]))
    mask = jnp.asarray(np.stack([m[1] for m in masks]))
    delta = f32(rng.normal(size=(s, B, T, A)))
    credit = f32(rng.normal(size=(s, B, T)))
    etas = f32([0.2, 0.6])
    w = jax.vmap(hta_weights)(delta, credit, mask, etas)
    for i in range(s):
        np.testing.assert_allclose(w[i], hta_weights(delta[i], credit[i], mask[i], etas[i]),
                                   rtol=1e-6)
    a_seq = f32(rng.normal(size=(s, B)))
    c = jax.vmap(fj.warmup_credit)(a_seq, turn_mask)
    np.testing.assert_allclose(c[1], fj.warmup_credit(a_seq[1], turn_mask[1]), rtol=1e-6)
    loss = jax.vmap(lambda *x: fj.factor_policy_loss(*x, clip_eps=0.2))(
        delta, delta * 0.9, delta, a_seq, mask, ~mask)
    one = fj.factor_policy_loss(delta[0], delta[0] * 0.9, delta[0], a_seq[0], mask[0], ~mask[0],
                                clip_eps=0.2)
    np.testing.assert_allclose(loss["act"][0], one["act"], rtol=1e-6)
    idx, _ = jax.vmap(fj.checkpoint_turns)(turn_mask, jax.random.split(jax.random.PRNGKey(0), s))
    assert idx.shape == (s, B, 2)
