"""factor_jax.methods' Schedule: the critic's warm-up kept at the authors' 10 steps at
reduced scale (factor.warmup_scaling "keep") or scaled with the run ("scale", the
earlier), eta's window after it; and FACTOR's credit at 20 steps under it (A_seq / T in
the warm-up, TAC's telescoping credit after)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factor_jax as fj
from asct_jax.infra.checks import ConfigError
from experiments.configs import base
from factor_jax.methods import Schedule, factor_config
from tests.helpers.tiers import examples


def _fc(steps: int, **fields):
    c = base.get_config()
    c.method = "factor"
    c.train.steps = steps
    c.factor.update(fields)
    return factor_config(c)


def test_twenty_steps_keep_ten_warmup_steps_and_move_eta_after_them():
    keep = Schedule.of(_fc(20))                     # the default
    assert _fc(20).warmup_scaling == "keep"
    assert (keep.warmup, keep.eta_start, keep.eta_end, keep.eta_origin) == (10, 11, 16, 9)
    assert (keep.eta_decay, keep.kl_decay) == (7, 7)
    np.testing.assert_allclose(keep.polyak, 1 - 0.005 * 150 / 20)   # 0.9625
    etas = [float(keep.eta(k, 0.7)) for k in range(1, 21)]
    assert etas[:10] == [0.0] * 10                  # no teacher during the warm-up
    np.testing.assert_allclose(etas[10:16], [0.5, 0.4, 0.3, 0.2, 0.1, 0.0], atol=1e-6)
    assert etas[16:] == [0.0] * 4


def test_twenty_steps_scale_is_the_earlier_schedule():
    s = Schedule.of(_fc(20, warmup_scaling="scale"))
    assert s == Schedule(warmup=1, eta_start=2, eta_end=7, eta_decay=7, kl_decay=7,
                         polyak=s.polyak, eta_origin=0)
    np.testing.assert_allclose(s.polyak, 0.9625)
    for k in range(1, 21):      # eta_k as fj.eta_schedule computed it before the option
        assert float(s.eta(k, 0.7)) == float(fj.eta_schedule(k, 0.7, 2, 7, 7))


def test_at_150_steps_both_are_the_authors_and_unscaled_is_as_given():
    authors = Schedule(warmup=10, eta_start=11, eta_end=49, eta_decay=50, kl_decay=50,
                       polyak=0.995)
    for scaling in ("keep", "scale"):
        assert Schedule.of(_fc(150, warmup_scaling=scaling)) == authors
        assert Schedule.of(_fc(20, warmup_scaling=scaling, scale_schedules=False)) == authors



@settings(max_examples=examples(40), deadline=None)
@given(steps=st.integers(1, 300))
def test_without_a_critic_the_teacher_is_on_from_step_1_and_decays_over_the_authors_span(
        steps):
    """asct_factor (no critic): no warm-up, eta_1 = eta0, then linear to 0 over D =
    scale(49 - 10) steps (D >= 1), under either warmup_scaling."""
    for scaling in ("keep", "scale"):
        s = Schedule.of(_fc(steps, warmup_scaling=scaling), critic=False)
        span = fj.scale_steps(39, steps)
        assert s.warmup == 0 and span >= 1
        etas = np.array([float(s.eta(k, 0.7)) for k in range(1, steps + 1)])
        np.testing.assert_allclose(etas[:span], 0.7 * (1 - np.arange(span) / span), atol=1e-6)
        assert np.all(etas[span:] == 0.0)
    assert Schedule.of(_fc(150), critic=False).eta_end == 39


def test_a_bad_warmup_scaling_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match=r"factor\.warmup_scaling"):
        _fc(20, warmup_scaling="stretch")


@settings(max_examples=examples(40), deadline=None)
@given(steps=st.integers(1, 150))
def test_keep_is_scale_with_eta_moved_to_after_the_kept_warmup(steps):
    keep = Schedule.of(_fc(steps))
    scale = Schedule.of(_fc(steps, warmup_scaling="scale"))
    assert keep.warmup == 10 and keep.eta_start == keep.warmup + 1
    assert scale.eta_start == scale.warmup + 1
    assert keep.eta_origin == keep.warmup - scale.warmup
    assert (keep.kl_decay, keep.polyak) == (scale.kl_decay, scale.polyak)
    for k in range(1, steps + 1):
        e = float(keep.eta(k, 0.7))
        assert e == float(scale.eta(k - keep.eta_origin, 0.7))
        assert k > keep.warmup or e == 0.0


@pytest.fixture(scope="module")
def setup(credit_setup):
    c = base.use_test_model(base.get_config())
    c.env.name = "rag_workflow"
    c.method = "factor"
    c.train.steps = 20
    return credit_setup(c)      # conftest: 2 x 2 episodes of the fresh policy


def _pieces(c, ctx, params, batch, step):
    from factor_jax.methods import factor_pieces, init_critic_state
    fc = factor_config(c)
    mstate = init_critic_state(fc, ctx, params, jax.random.key(5))
    return jax.jit(lambda pr, b, k, s, ms: factor_pieces(fc, ctx, pr, b, k, s, ms))(
        params, batch, jax.random.key(4), jnp.int32(step), mstate)


@pytest.mark.slow
def test_twenty_step_credit_is_the_split_in_the_warmup_then_tac(setup):
    """k <= 10: A*_t = A_seq / T_i (eta 0); k = 11: TAC's credit (the target head's
    values enter it: not the split), summing to A_seq (rag_workflow rewards only the last
    turn). Under "scale" k = 2 is already TAC's."""
    c, ctx, params, batch = setup
    turn = np.asarray(batch.turn_mask)
    for step in (0, 9):                                  # k = 1, k = 10
        p = _pieces(c, ctx, params, batch, step)
        assert bool(p.warm) and float(p.eta) == 0.0
        np.testing.assert_allclose(np.asarray(p.credit), np.asarray(fj.warmup_credit(
            p.a_seq, batch.turn_mask)), atol=1e-6)
    p = _pieces(c, ctx, params, batch, 10)               # k = 11
    assert not bool(p.warm) and float(p.eta) == pytest.approx(0.5)
    credit = np.asarray(p.credit)
    np.testing.assert_allclose(credit.sum(1), np.asarray(p.a_seq), atol=1e-5)
    np.testing.assert_allclose(credit.sum(1), np.asarray(p.credit_total), atol=1e-5)
    tac = fj.tac_credit(p.rewards, p.values, p.baseline, batch.turn_mask)
    np.testing.assert_allclose(credit, np.asarray(tac), atol=1e-6)
    assert np.all(credit[~turn] == 0)
    c2 = c.copy_and_resolve_references()
    c2.factor.warmup_scaling = "scale"
    assert not bool(_pieces(c2, ctx, params, batch, 1).warm)     # k = 2

