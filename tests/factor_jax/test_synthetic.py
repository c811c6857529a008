"""factor_jax.synthetic (NumPy): `masks_from_lengths` gives prefix masks (T_i live turns,
L_t live tokens on each live turn, none on padded turns); `random_batch` gives a FACTOR
batch of the documented keys, shapes and dtypes on those masks (the given or drawn
lengths, at least one turn and one token per live turn), seeded, with log-probs of
magnitude ~scale and `pad_value` everywhere off the masks; `pad_batch` appends padded turns
and tokens, keeps every live entry and puts garbage (NaN, a value, or junk of magnitude
1e3) on every masked float entry, leaving [B] arrays and its input untouched."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from factor_jax.synthetic import masks_from_lengths, pad_batch, random_batch

TURN_KEYS = ("rewards", "values")
TOKEN_KEYS = ("teacher_logp", "student_logp", "logp", "logp_old")


@st.composite
def lengths(draw):
    b, t, a = draw(st.integers(1, 4)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    turns = draw(st.lists(st.integers(0, t), min_size=b, max_size=b))
    tokens = draw(st.lists(st.lists(st.integers(1, a), min_size=t, max_size=t),
                           min_size=b, max_size=b))
    return turns, np.asarray(tokens), t, a


@given(lengths())
def test_masks_are_prefixes_of_the_lengths(case):
    turns, tokens, t, a = case
    turn_mask, token_mask = masks_from_lengths(turns, tokens, t, a)
    assert turn_mask.shape == (len(turns), t) and token_mask.shape == (len(turns), t, a)
    assert turn_mask.dtype == token_mask.dtype == bool
    for i, n in enumerate(turns):
        np.testing.assert_array_equal(turn_mask[i], np.arange(t) < n)
        for j in range(t):
            np.testing.assert_array_equal(token_mask[i, j],
                                          np.arange(a) < (tokens[i, j] if j < n else 0))


def test_random_batch_keys_shapes_and_dtypes():
    out = random_batch(np.random.default_rng(0), 3, 4, 5)
    assert set(out) == {"rewards", "values", "baseline", "turn_mask", "token_mask", *TOKEN_KEYS}
    shapes = {"baseline": (3,), "turn_mask": (3, 4), "token_mask": (3, 4, 5),
              **{k: (3, 4) for k in TURN_KEYS}, **{k: (3, 4, 5) for k in TOKEN_KEYS}}
    assert {k: v.shape for k, v in out.items()} == shapes
    assert {k: v.dtype for k, v in out.items()} == {
        k: (np.dtype(bool) if k.endswith("mask") else np.dtype(np.float32)) for k in out}


@given(seed=st.integers(0, 10_000), b=st.integers(1, 5), t=st.integers(1, 6),
       a=st.integers(1, 5))
def test_random_batch_lives_on_its_drawn_masks_and_is_seeded(seed, b, t, a):
    out = random_batch(np.random.default_rng(seed), b, t, a, pad_value=np.nan)
    turn, tok = out["turn_mask"], out["token_mask"]
    assert turn[:, 0].all()                                   # T_i >= 1
    assert (tok[..., 0] == turn).all()                        # L_t >= 1 on live turns
    assert not (turn[:, 1:] & ~turn[:, :-1]).any()            # prefixes
    assert not (tok[..., 1:] & ~tok[..., :-1]).any() and not (tok & ~turn[..., None]).any()
    for k in TURN_KEYS:
        assert np.isfinite(out[k][turn]).all() and np.isnan(out[k][~turn]).all()
    for k in TOKEN_KEYS:
        assert np.isfinite(out[k][tok]).all() and np.isnan(out[k][~tok]).all()
    for k in ("teacher_logp", "student_logp", "logp_old"):
        assert (out[k][tok] <= 0).all()
    assert np.isfinite(out["baseline"]).all()
    again = random_batch(np.random.default_rng(seed), b, t, a, pad_value=np.nan)
    for k in out:
        np.testing.assert_array_equal(again[k], out[k])


def test_given_lengths_and_pad_value_are_used():
    turns, tokens = [2, 0, 3], np.array([[1, 3, 2], [2, 2, 2], [3, 1, 1]])
    out = random_batch(np.random.default_rng(1), 3, 3, 3, turn_lengths=turns,
                       token_lengths=tokens, pad_value=-7.0)
    want_turn, want_tok = masks_from_lengths(turns, tokens, 3, 3)
    np.testing.assert_array_equal(out["turn_mask"], want_turn)
    np.testing.assert_array_equal(out["token_mask"], want_tok)
    assert (out["rewards"][1] == -7.0).all() and (out["logp"][0, 2] == -7.0).all()
    assert (out["teacher_logp"][~want_tok] == -7.0).all()
    assert (out["teacher_logp"][want_tok] != -7.0).all()


@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_log_probs_have_magnitude_scale(scale):
    out = random_batch(np.random.default_rng(2), 64, 8, 8, scale=scale)
    tok = out["token_mask"]
    for k in ("teacher_logp", "student_logp", "logp_old"):
        assert -out[k][tok].mean() == pytest.approx(scale, rel=0.1)   # -scale Exp(1)
    step = out["logp"][tok] - out["logp_old"][tok]                      # logp_old + 0.1 N
    assert abs(step.mean()) < 0.01 and step.std() == pytest.approx(0.1, rel=0.1)


def test_the_old_teacher_and_student_log_probs_are_at_most_zero_logp_is_near_logp_old():
    out = random_batch(np.random.default_rng(3), 8, 6, 5)
    live = out["token_mask"]
    for k in ("teacher_logp", "student_logp", "logp_old"):
        assert (out[k][live] <= 0).all(), k
    step = (out["logp"] - out["logp_old"])[live]        # logp = logp_old + 0.1 N(0, 1)
    assert abs(step.std() - 0.1) < 0.02 and abs(step.mean()) < 0.02


@given(seed=st.integers(0, 10_000), extra_turns=st.integers(0, 3),
       extra_tokens=st.integers(0, 3), garbage=st.sampled_from([np.nan, 5.0, None]))
def test_pad_batch_appends_masked_garbage_and_keeps_the_live_entries(seed, extra_turns,
                                                                       extra_tokens, garbage):
    rng = np.random.default_rng(seed)
    batch = random_batch(rng, 3, 4, 2)
    before = {k: v.copy() for k, v in batch.items()}
    out = pad_batch(batch, extra_turns, extra_tokens, rng, garbage=garbage)
    t, a = 4 + extra_turns, 2 + extra_tokens
    turn, tok = out["turn_mask"], out["token_mask"]
    assert turn.shape == (3, t) and tok.shape == (3, t, a)
    np.testing.assert_array_equal(turn[:, :4], batch["turn_mask"])
    np.testing.assert_array_equal(tok[:, :4, :2], batch["token_mask"])
    assert not turn[:, 4:].any() and not tok[:, 4:].any() and not tok[..., 2:].any()
    np.testing.assert_array_equal(out["baseline"], batch["baseline"])
    for k in TURN_KEYS + TOKEN_KEYS:
        mask, x = (turn, out[k]) if k in TURN_KEYS else (tok, out[k])
        assert x.shape == mask.shape and x.dtype == np.float32
        live = mask[:, :4] if k in TURN_KEYS else mask[:, :4, :2]
        np.testing.assert_array_equal(x[mask], batch[k][live])
        junk = x[~mask]
        if garbage is None:
            assert np.isfinite(junk).all() and (junk.size == 0 or np.abs(junk).mean() > 100)
        elif np.isnan(garbage):
            assert np.isnan(junk).all()
        else:
            assert (junk == garbage).all()
    for k, v in before.items():                               # the input is not modified
        np.testing.assert_array_equal(batch[k], v)
