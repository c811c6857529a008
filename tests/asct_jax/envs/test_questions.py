"""Which question each episode plays (asct_jax.envs.questions): the walk over the
training split without replacement (the ASCT paper's iterations), the evaluation over
every test question once, and the rollout that plays them (ragspace)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from asct_jax.envs import make
from asct_jax.envs import questions as Qs
from asct_jax.envs.play import play, uniform_chooser
from tests.helpers.tiers import examples


def test_walk_index_hand_worked():
    """n = 5 questions, G = 2 groups a step: draw i = 2k + g, pass i // 5, position i % 5.
    Steps 0..3 draw i = (0, 1), (2, 3), (4, 5), (6, 7)."""
    got = [tuple(np.asarray(x).tolist() for x in Qs.walk_index(jnp.int32(k), 2, 5))
           for k in range(4)]
    assert got == [([0, 0], [0, 1]), ([0, 0], [2, 3]), ([0, 1], [4, 0]), ([1, 1], [1, 2])]


def test_question_walk_with_given_permutations(monkeypatch):
    """Passes perm_0 = (0, 2, 4, 1, 3), perm_1 = (1, 3, 0, 2, 4) (perm_e[j] = (2 j + e)
    mod 5) over the split [10, 15), 2 groups a step: step 0 plays 10 + (0, 2), step 1
    10 + (4, 1), step 2 10 + (3, perm_1[0] = 1), step 3 10 + (3, 0). Steps 0-2 hold every
    question once (pass 0) before pass 1 begins."""
    monkeypatch.setattr(Qs, "pass_permutation",
                        lambda key, e, n: (2 * jnp.arange(n) + e) % n)
    key = jax.random.key(0)
    got = [np.asarray(Qs.question_walk(key, jnp.int32(k), 2, 10, 15)).tolist()
           for k in range(4)]
    assert got == [[10, 12], [14, 11], [13, 11], [13, 10]]


@settings(deadline=None, max_examples=examples(12))
@given(st.integers(0, 2**31 - 1), st.integers(1, 7), st.integers(1, 9), st.integers(0, 50))
def test_walk_is_without_replacement_within_each_pass(seed, n, groups, lo):
    """The draws of consecutive steps, concatenated, are passes of n: each a permutation
    of [lo, lo + n); the ids are a pure function of (key, step)."""
    key = jax.random.key(seed)
    passes = 3
    steps = -(-passes * n // groups) + 1
    walk = jax.jit(lambda k: Qs.question_walk(key, k, groups, lo, lo + n))
    ids = np.concatenate([np.asarray(walk(jnp.int32(k))) for k in range(steps)])
    for p in range(passes):
        np.testing.assert_array_equal(np.sort(ids[p * n:(p + 1) * n]), np.arange(lo, lo + n))
    np.testing.assert_array_equal(np.asarray(walk(jnp.int32(1))), ids[groups:2 * groups])


def test_envs_without_a_question_split_keep_their_own_draw():
    env, params = make("rag_workflow")
    key = jax.random.key(0)
    assert Qs.question_env(env) is None
    assert Qs.step_question_ids(env, params, key, jnp.int32(0), 4) is None
    assert Qs.evaluation_question_ids(env, params) is None


@pytest.fixture(scope="module")
def rag():
    return make("ragspace", n_train=6, n_val=2, n_test=5)


def test_a_view_of_a_question_env_is_one(rag):
    """An environment seen through a view (LLMView's `inner`) starts the view's episodes
    on a chosen question."""
    env, params = rag

    class View:
        inner = env

    assert Qs.question_env(View()) is env and Qs.question_env(env) is env


def test_training_groups_play_the_walk(rag):
    """Step 1 of 4 groups over the 6 training questions: each group's G = 2 episodes
    start on the walk's question, from the state reset_question gives it (its reset key)."""
    env, params = rag
    key = jax.random.key(3)
    qids = Qs.step_question_ids(env, params, key, jnp.int32(1), 4)
    assert np.all((np.asarray(qids) >= 0) & (np.asarray(qids) < 6))
    eps = jax.jit(lambda k, q: play(env, params, uniform_chooser, k, 4, 2, question_ids=q))(
        key, qids)
    start = jax.tree.map(lambda x: x[:, 0], eps.record["states"])
    np.testing.assert_array_equal(np.asarray(start.qid), np.repeat(np.asarray(qids), 2))
    s0 = env.reset_question(start.key[0], qids[0], params)
    np.testing.assert_array_equal(np.asarray(eps.record["obs"][0, 0]),
                                  np.asarray(env.observe(s0, params)))


def test_evaluation_plays_every_test_question_once(rag):
    """The test split [8, 13): 5 episodes of group size 1, qids 8..12 each exactly once
    (not 5 draws with replacement); max_episodes 3 keeps the first 3."""
    env, params = rag
    params = params.replace(split="test")
    qids = Qs.evaluation_question_ids(env, params)
    np.testing.assert_array_equal(np.asarray(qids), [8, 9, 10, 11, 12])
    np.testing.assert_array_equal(np.asarray(Qs.evaluation_question_ids(env, params, 3)),
                                  [8, 9, 10])
    eps = play(env, params, uniform_chooser, jax.random.key(0), qids.shape[0], 1,
               question_ids=qids)
    played = np.sort(np.asarray(eps.record["states"].qid[:, 0]))
    np.testing.assert_array_equal(played, [8, 9, 10, 11, 12])
    assert np.all(np.asarray(eps.final.done))
