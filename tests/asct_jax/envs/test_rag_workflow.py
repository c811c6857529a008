"""Tests of `rag_workflow` (asct_jax.envs.rag_workflow) beyond the protocol of
test_envs.py."""
import jax
import numpy as np

from asct_jax.envs import PAD_ID, make
from asct_jax.envs.tokenizer import decode


def test_rag_component_sets_and_descriptions():
    env, p = make("rag_workflow")
    env_t, p_t = make("rag_workflow", component_set="transfer")
    env_n, p_n = make("rag_workflow", describe_components=False)
    costs = np.asarray(env.action_costs(None, p))
    assert costs.max() / costs.min() >= 5
    assert not np.array_equal(np.asarray(env_t.action_costs(None, p_t)), costs)
    assert sorted(np.asarray(p_t.ctype)) == sorted(np.asarray(p.ctype))
    c0, c1 = decode(env.t_cand[0]), decode(env_t.t_cand[1])   # both "retrieve"-type
    assert "retrieve" in c0 and "search" in c1
    k = jax.random.PRNGKey(0)
    _, ts = env.reset(k, p)
    _, ts_n = env_n.reset(k, p_n)
    n, n_n = int(np.sum(ts.observation != PAD_ID)), int(np.sum(ts_n.observation != PAD_ID))
    assert n - n_n == 4 * env.num_actions + 1
    assert "costly thorough search" in decode(ts.observation)
    assert "costly" not in decode(ts_n.observation)


def test_rag_workflow_named_fields():
    from asct_jax.envs.rag_workflow import DECOMPOSE, Flag, Hop

    env, p = make("rag_workflow")
    s, _ = env.reset(jax.random.PRNGKey(0), p)
    assert np.all(np.asarray(s.status) == Hop.NONE)
    slot = int(np.argmax(np.asarray(p.ctype) == DECOMPOSE))
    s, _ = env.step(s, env.legal_actions(s, p)[0][slot], p)
    assert bool(s.flags[Flag.DECOMPOSED]) and not bool(s.flags[Flag.VERIFIED])
