"""Constrained decoding (asct_jax.rl.policy): the candidate trie, the constrained and the
candidate-only log-probs, the policy's scores against full-logits references, and
policy.label_score="mean"."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.rl.padding import left_align
from asct_jax.rl.policy import (allowed_tokens, candidate_constrained_log_probs,
                                constrained_log_probs, trie_live)


def test_allowed_tokens_follow_the_candidate_trie():
    cands = jnp.array([[5, 6, 1, 0], [5, 7, 1, 0], [8, 1, 0, 0]])
    legal = jnp.array([True, True, False])
    allowed = allowed_tokens(jnp.array([5, 7, 1, 0]), cands, legal, 10)
    assert set(np.flatnonzero(allowed[0])) == {5}          # candidate 2 is illegal
    assert set(np.flatnonzero(allowed[1])) == {6, 7}
    assert set(np.flatnonzero(allowed[2])) == {1}
    assert not np.any(allowed[3])                           # after EOS: nothing


def test_constrained_log_probs_normalise_over_allowed_tokens():
    logits = jax.random.normal(jax.random.key(0), (3, 10))
    allowed = jnp.zeros((3, 10), bool).at[0, [2, 3]].set(True).at[1, 4].set(True)
    logp, ent = constrained_log_probs(logits, allowed, jnp.array([2, 4, 0]))
    z = jax.nn.logsumexp(logits[0, jnp.array([2, 3])])
    np.testing.assert_allclose(logp[0], logits[0, 2] - z, rtol=1e-6)
    assert logp[1] == 0.0 and ent[1] == 0.0                  # forced token
    assert logp[2] == 0.0                                    # no allowed token: masked


def _random_candidates(key, n, k, a, alphabet=(5, 6, 7)):
    """[n, k, a] candidates from a tiny alphabet (shared prefixes, duplicates), each of a
    random length then EOS then PAD; some rows all PAD; legal [n, k] random."""
    k1, k2, k3 = jax.random.split(key, 3)
    tok = jnp.asarray(alphabet)[jax.random.randint(k1, (n, k, a), 0, len(alphabet))]
    length = jax.random.randint(k2, (n, k, 1), 0, a)          # real tokens before EOS
    pos = jnp.arange(a)
    cands = jnp.where(pos < length, tok, jnp.where(pos == length, 1, 0))
    cands = cands.at[0, -1].set(0)                             # an all-PAD candidate
    legal = jax.random.bernoulli(k3, 0.7, (n, k)).at[1].set(False)   # a row with none
    return cands.astype(jnp.int32), legal


def test_candidate_log_probs_equal_the_full_masked_softmax():
    """O(K A) constrained log-probs (candidate tokens' logits only) == the [A, V] masked
    softmax, for every candidate and for random other actions (illegal, off-trie)."""
    n, k, a, v = 64, 6, 5, 12
    cands, legal = _random_candidates(jax.random.key(0), n, k, a)
    logits = 3.0 * jax.random.normal(jax.random.key(1), (n, k, a, v))
    others = _random_candidates(jax.random.key(2), n, 1, a)[0][:, 0]   # [n, a]
    for actions, lg in [(cands, logits), (others[:, None], logits[:, :1])]:
        ref_fn = jax.vmap(jax.vmap(
            lambda lo, act, c, l: constrained_log_probs(lo, allowed_tokens(act, c, l, v), act),
            in_axes=(0, 0, None, None)))
        ref_lp, ref_ent = ref_fn(lg, actions, cands, legal)                 # [n, kk, a]
        live = trie_live(actions, cands[:, None], legal[:, None])           # [n, kk, K, a]
        c_b = jnp.broadcast_to(cands[:, None], live.shape)
        cand_logits = jnp.take_along_axis(lg[:, :, None], c_b[..., None], axis=-1)[..., 0]
        lp, ent = candidate_constrained_log_probs(cand_logits, c_b, live, actions)
        np.testing.assert_allclose(lp, ref_lp, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ent, ref_ent, rtol=1e-5, atol=1e-5)
    assert np.any(np.asarray(ref_lp) < -1e8)          # off-trie tokens were exercised


@pytest.mark.slow
def test_policy_scores_equal_full_logits_reference():
    """Policy.action_log_probs / candidate_log_probs / token_log_probs after another
    prefix (hidden states x LM-head rows of the candidates' tokens) == full [.., V]
    logits + masked softmax."""
    from flax import nnx
    from asct_jax.models import Decoder, ModelConfig
    from asct_jax.rl.policy import Policy
    cfg = ModelConfig(vocab_size=16, hidden_size=32, num_layers=1, num_heads=2,
                      num_kv_heads=1, head_dim=16, intermediate_size=64)
    graphdef, params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)))
    leaves, tdef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(3), len(leaves))
    params = jax.tree.unflatten(tdef, [x + 0.5 * jax.random.normal(q, x.shape)
                                       for x, q in zip(leaves, keys)])
    n, k, a, o, f = 8, 4, 4, 6, 3
    policy = Policy(graphdef, cfg.vocab_size, o, a, f)
    cands, legal = _random_candidates(jax.random.key(4), n, k, a)
    legal = legal.at[:, 0].set(True)
    obs = jnp.where(jnp.arange(o) < jax.random.randint(jax.random.key(5), (n, 1), 1, o + 1),
                    jax.random.randint(jax.random.key(6), (n, o), 5, 16), 0)
    feedback = jnp.where(jnp.arange(f) < 2, 9, 0) * jnp.ones((n, f), jnp.int32)
    model = nnx.merge(graphdef, params)

    def reference(prefix, actions):
        prefix = left_align(prefix)
        ids = jnp.concatenate([prefix, actions], 1)
        mask = jnp.concatenate([prefix != 0, jnp.ones_like(actions, bool)], 1)
        logits = model(ids, attention_mask=mask)[:, prefix.shape[1] - 1:-1]
        allowed = jax.vmap(allowed_tokens, in_axes=(0, 0, 0, None))(actions, cands, legal,
                                                                     cfg.vocab_size)
        return jax.vmap(constrained_log_probs)(logits, allowed, actions)

    actions = cands[:, 0]
    lp, ent, _ = policy.action_log_probs(params, obs, actions, cands, legal)
    ref_lp, ref_ent = reference(obs, actions)
    np.testing.assert_allclose(lp, ref_lp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent, ref_ent, rtol=1e-5, atol=1e-5)
    prefix = jnp.concatenate([obs, jnp.full((n, 1), 4), feedback], 1)
    prefix = jnp.take_along_axis(prefix, jnp.argsort(prefix == 0, axis=1, stable=True), 1)
    np.testing.assert_allclose(
        policy.token_log_probs(params, prefix, actions, cands, legal),
        reference(prefix, actions)[0], rtol=1e-5, atol=1e-5)
    cand_logp, token_logp, _ = policy.candidate_log_probs(params, obs, cands, legal)
    for i in range(k):
        np.testing.assert_allclose(token_logp[:, i], reference(obs, cands[:, i])[0],
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cand_logp, jnp.where(legal, token_logp.sum(-1), -1e9),
                               rtol=1e-6)


@pytest.mark.slow
def test_label_score_mean_is_softmax_of_mean_full_vocab_log_probs():
    """policy.label_score="mean" (the ASCT paper's scoring): pi(a_k | x) = softmax over the
    legal labels of each label's mean full-vocabulary token log-prob (PAD excluded),
    computed from the full [.., V] logits; the decision's log-prob sits on the first token
    only (action_log_probs agrees with candidate_log_probs), and scored_tokens marks it."""
    from flax import nnx
    from asct_jax.models import Decoder, ModelConfig
    from asct_jax.rl.policy import Policy
    cfg = ModelConfig(vocab_size=16, hidden_size=32, num_layers=1, num_heads=2,
                      num_kv_heads=1, head_dim=16, intermediate_size=64)
    graphdef, params = nnx.split(Decoder(cfg, rngs=nnx.Rngs(1)))
    n, k, a, o = 6, 4, 4, 5
    policy = Policy(graphdef, cfg.vocab_size, o, a, 0, label_score="mean")
    cands, legal = _random_candidates(jax.random.key(7), n, k, a)
    cands = cands.at[:, :, 0].set(jnp.where(cands[:, :, 0] == 0, 5, cands[:, :, 0]))
    legal = legal.at[:, 0].set(True)
    obs = jax.random.randint(jax.random.key(8), (n, o), 5, 16)
    model = nnx.merge(graphdef, params)
    cand_logp, token_logp, _ = policy.candidate_log_probs(params, obs, cands, legal)
    scores = np.full((n, k), -np.inf)
    for i in range(k):
        ids = jnp.concatenate([obs, cands[:, i]], 1)
        logits = model(ids, attention_mask=jnp.ones_like(ids, bool))[:, o - 1:-1]
        full = jax.nn.log_softmax(logits, -1)
        tok = jnp.take_along_axis(full, cands[:, i, :, None], -1)[..., 0]
        real = cands[:, i] != 0
        scores[:, i] = np.asarray(jnp.sum(jnp.where(real, tok, 0), -1) / real.sum(-1))
    scores = np.where(np.asarray(legal), scores, -np.inf)
    ref = scores - np.log(np.exp(scores - scores.max(1, keepdims=True)).sum(1,
                                                                           keepdims=True)) \
        - scores.max(1, keepdims=True)
    np.testing.assert_allclose(np.where(legal, cand_logp, 0), np.where(legal, ref, 0),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.exp(np.asarray(cand_logp)).sum(1), 1.0, atol=1e-5)
    np.testing.assert_allclose(token_logp[..., 1:], 0.0)
    lp, ent, _ = policy.action_log_probs(params, obs, cands[:, 0], cands, legal)
    np.testing.assert_allclose(lp[:, 0], cand_logp[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lp[:, 1:], 0.0)
    assert np.all(np.asarray(ent[:, 0]) >= 0)
    assert np.array_equal(np.asarray(policy.scored_tokens(cands[:, 0]))[:, 1:], np.zeros((n, a - 1), bool))
    with pytest.raises(ValueError, match="policy.label_score"):
        Policy(graphdef, cfg.vocab_size, o, a, 0, label_score="max")
