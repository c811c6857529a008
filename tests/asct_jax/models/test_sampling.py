"""Tests of asct_jax.models.sampling against its docstrings and a float64 NumPy reference:
top_p_filter keeps exactly the smallest set of most likely tokens whose mass reaches top_p
(kept logits unchanged, the rest -inf, the most likely token always kept, masked -inf
tokens never kept); sample_tokens is the argmax when greedy (whatever the temperature and
top_p), never draws a masked or out-of-nucleus token, tends to the argmax as the
temperature goes to 0, and draws from softmax(logits / temperature) truncated to the
nucleus of that tempered distribution: the frequencies of 20,000 draws on a fixed key
within 5 binomial standard errors of it, several temperatures and top_p served by one
compiled program.

Logits are drawn distinct (a tie at the nucleus' edge keeps every tied token). The hand
case of top_p_filter is in test_generate.py.
"""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import assume, given, strategies as st
from hypothesis.extra import numpy as hnp

from asct_jax.models import sampling

B, V = 4, 8
REPEAT = 64   # draws per row in the property test
MARGIN = 1e-4  # the reference's cumulative masses stay this far from top_p (float32 sums)

_filter = jax.jit(sampling.top_p_filter)
_sample = jax.jit(sampling.sample_tokens, static_argnames="greedy")


def _softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _nucleus(logits, top_p):
    """[B, V] bool: the smallest most-likely set of each row with mass >= top_p (at least
    one token; -inf logits have mass 0), and whether every cumulative mass before a
    finite token is at least MARGIN from top_p."""
    logits = np.asarray(logits, np.float64)
    keep = np.zeros(logits.shape, bool)
    clear = True
    for r, row in enumerate(logits):
        order = np.argsort(-row, kind="stable")
        p = _softmax(row)[order]
        before = np.cumsum(p) - p
        finite = np.isfinite(row[order])
        clear &= bool(np.all(np.abs(before[finite] - top_p) > MARGIN))
        keep[r, order[:max(int(np.sum(before < top_p)), 1)]] = True
    return keep & np.isfinite(logits), clear


def _distinct(gaps, perms):
    """Rows of increasing logits (consecutive gaps >= 0.01, centred), each shuffled."""
    rows = np.cumsum(gaps, axis=1)
    rows = rows - rows.mean(1, keepdims=True)
    return np.stack([row[list(p)] for row, p in zip(rows, perms)]).astype(np.float32)


logits_st = st.builds(
    _distinct, hnp.arrays(np.float64, (B, V), elements=st.floats(0.01, 0.6)),
    st.lists(st.permutations(range(V)), min_size=B, max_size=B))
mask_st = hnp.arrays(np.bool_, (B, V), elements=st.sampled_from([False, False, False, True]))


def _masked(logits, mask):
    """-inf where mask, the row's largest logit never masked."""
    mask = mask.copy()
    mask[np.arange(B), np.argmax(logits, axis=1)] = False
    return np.where(mask, -np.inf, logits).astype(np.float32)


# ----------------------------------------------------------------------- top_p_filter
@given(logits=logits_st, mask=mask_st, top_p=st.floats(0.01, 1.0))
def test_top_p_filter_keeps_the_smallest_set_reaching_top_p(logits, mask, top_p):
    logits = _masked(logits, mask)
    keep, clear = _nucleus(logits, top_p)
    assume(clear)
    out = np.asarray(_filter(jnp.asarray(logits), jnp.float32(top_p)))
    np.testing.assert_array_equal(np.isfinite(out), keep)
    np.testing.assert_array_equal(out[keep], logits[keep])          # kept logits unchanged
    assert np.all(out[~keep] == -np.inf)
    assert np.all(keep[np.arange(B), np.argmax(logits, axis=1)])    # the most likely kept
    # Reaches top_p, and no smaller set does: without its least likely token it falls short.
    p = _softmax(logits)
    mass = np.where(keep, p, 0.0).sum(1)
    least = np.where(keep, p, np.inf).min(1)
    assert np.all(mass >= top_p - 1e-9) and np.all((keep.sum(1) == 1) | (mass - least < top_p))


# ---------------------------------------------------------------------- sample_tokens
@given(logits=logits_st, mask=mask_st, temperature=st.floats(0.0, 3.0),
       top_p=st.floats(0.0, 1.0), seed=st.integers(0, 2**31 - 1))
def test_greedy_is_the_argmax(logits, mask, temperature, top_p, seed):
    logits = _masked(logits, mask)
    tok = _sample(jax.random.PRNGKey(seed), jnp.asarray(logits), jnp.float32(temperature),
                  jnp.float32(top_p), greedy=True)
    assert tok.shape == (B,) and tok.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(tok), np.argmax(logits, axis=1))


@given(logits=logits_st, mask=mask_st, temperature=st.floats(0.25, 4.0),
       top_p=st.floats(0.05, 1.0), seed=st.integers(0, 2**31 - 1))
def test_samples_stay_in_the_tempered_nucleus(logits, mask, temperature, top_p, seed):
    """REPEAT draws of each row: never a masked token, never one outside the nucleus of
    softmax(logits / temperature)."""
    logits = _masked(logits, mask)
    scaled = logits / np.float32(temperature)
    keep, clear = _nucleus(scaled, top_p) if top_p < 1.0 else (np.isfinite(scaled), True)
    assume(clear)
    rows = np.repeat(logits, REPEAT, axis=0)
    tok = np.asarray(_sample(jax.random.PRNGKey(seed), jnp.asarray(rows),
                             jnp.float32(temperature), jnp.float32(top_p), greedy=False))
    assert tok.shape == (B * REPEAT,) and tok.dtype == np.int32
    assert np.all(keep[np.repeat(np.arange(B), REPEAT), tok])


def test_small_temperature_tends_to_the_argmax():
    """Logits at least 0.05 apart at temperature 1e-3: the runner-up has probability
    below e^-50, so every draw is the argmax, with or without top_p."""
    rng = np.random.default_rng(0)
    base = np.stack([rng.permutation(V) for _ in range(B)]).astype(np.float32) * 0.05
    base[1, 3] = -np.inf
    rows = jnp.asarray(np.repeat(base, 500, axis=0))
    for top_p in (1.0, 0.9):
        tok = np.asarray(_sample(jax.random.PRNGKey(1), rows, jnp.float32(1e-3),
                                 jnp.float32(top_p), greedy=False))
        np.testing.assert_array_equal(tok, np.repeat(np.argmax(base, axis=1), 500))


def test_sampling_distribution_matches_tempered_nucleus():
    """20,000 draws of one row per (temperature, top_p); the nucleus is that of the
    tempered distribution ((2, 0.7) keeps 3 tokens, (0.5, 0.9) 2; taken before the
    temperature it would be 2 and 4). One compiled program for all of them."""
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -np.inf], np.float32)
    n = 20_000
    rows = jnp.asarray(np.tile(logits, (n, 1)))
    before = _sample._cache_size()
    configs = [(1.0, 1.0), (0.5, 1.0), (2.0, 1.0), (1.0, 0.7), (2.0, 0.7), (0.5, 0.9), (2.0, 0.9)]
    for i, (temperature, top_p) in enumerate(configs):
        scaled = logits[None] / temperature
        keep = _nucleus(scaled, top_p)[0][0] if top_p < 1.0 else np.isfinite(logits)
        q = np.where(keep, _softmax(scaled)[0], 0.0)
        q /= q.sum()
        tok = np.asarray(_sample(jax.random.PRNGKey(10 + i), rows, jnp.float32(temperature),
                                 jnp.float32(top_p), greedy=False))
        freq = np.bincount(tok, minlength=len(logits)) / n
        tol = 5 * np.sqrt(q * (1 - q) / n)
        assert np.all(freq[q == 0] == 0), (temperature, top_p, freq)
        assert np.all(np.abs(freq - q) <= tol), (temperature, top_p, freq, q)
    assert _sample._cache_size() == before + 1


def test_same_key_same_draws_other_key_other_draws():
    rows = jnp.asarray(np.tile(np.linspace(-1, 1, V, dtype=np.float32), (256, 1)))
    draw = lambda seed: np.asarray(_sample(jax.random.PRNGKey(seed), rows, jnp.float32(1.0),  # noqa: E731
                                           jnp.float32(1.0), greedy=False))
    np.testing.assert_array_equal(draw(3), draw(3))
    assert not np.array_equal(draw(3), draw(4))
