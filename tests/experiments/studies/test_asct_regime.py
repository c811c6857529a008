"""experiments/studies/asct_regime.py: the actor's uncertainty, the newly scored decisions of
VinePPO's continuations, Table 14's centring check and the paper's implied figures, on
hand-checked cases (TinyWorkflow, tests/helpers/tiny_workflow.py)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import tiny_workflow as tw
from experiments.studies import asct_regime as ar

NEG = -1e9


def test_paper_implied_figures_follow_from_its_ledger():
    p = ar.paper_implied()
    assert p["states_per_seed"] == pytest.approx(52_800, abs=1)          # 197.077 M / 3,732.5
    assert p["states_per_seed"] == pytest.approx(p["states_per_seed_table14"], rel=1e-3)
    assert p["tokens_per_decision"] == pytest.approx(481.9, abs=0.05)    # 25.442 M / 52,800
    assert p["vine_newly_scored_per_state"] == pytest.approx(9.88, abs=0.01)
    assert p["vine_t_env_per_state"] == pytest.approx(2596, abs=1)       # 137.088 M / 52,800
    assert p["sign_change_rate"] == pytest.approx(0.0866, abs=1e-4)


def test_uncertainty_on_a_hand_checked_batch():
    logp = jnp.log(jnp.array([[0.5, 0.5, 1.0], [1.0, 1.0, 1.0], [0.9, 0.1, 1.0],
                              [0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]))
    legal = jnp.array([[1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]], bool)
    live = jnp.array([True, True, True, True, False])     # the last is padding
    two = ar.uncertainty(logp, legal, live)
    h = lambda *p: -sum(x * math.log(x) for x in p)  # noqa: E731
    # States 0, 2, 3 (state 1 has one legal label, state 4 is not live).
    assert float(two["states"]) == 3
    assert float(two["entropy"]) == pytest.approx((h(.5, .5) + h(.9, .1) + h(.2, .3, .5)) / 3,
                                                  rel=1e-5)
    assert float(two["top"]) == pytest.approx((0.5 + 0.9 + 0.5) / 3, rel=1e-5)
    three = ar.uncertainty(logp, legal, live, min_legal=3)
    assert float(three["states"]) == 1 and float(three["top"]) == pytest.approx(0.5)


def test_newly_scored_counts_the_pairs_the_main_trajectory_did_not_visit():
    scored = jnp.zeros((2, 6), bool).at[0, jnp.array([1, 2, 4])].set(True).at[1, 3].set(True)
    qid, node = jnp.array([0, 0, 1, 1]), jnp.array([0, 2, 3, 4])
    assert int(ar.newly_scored(scored, qid, node, jnp.array([True] * 4))) == 2   # (0,1) (0,4)
    # A padding turn's pair does not count as visited.
    assert int(ar.newly_scored(scored, qid, node, jnp.array([True, False, True, True]))) == 3


def test_sign_changes_between_actor_and_uniform_centring():
    q = jnp.array([[0.0, 1.0, 0.45], [0.0, 1.0, 0.2], [0.0, 1.0, 0.45], [0.0, 1.0, 0.0]])
    mask = jnp.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1]], bool)
    prior = jnp.log(jnp.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.5, 0.5, 1.0],
                               [0.5, 0.25, 0.25]]))
    taken = jnp.array([2, 2, 0, 2])
    live = jnp.ones(4, bool)
    # Row 0: A = 0.45 - 0.145 > 0, uniform 0.45 - 0.483 < 0 (a change); row 1: both < 0;
    # row 2: two searched labels (not counted); row 3: both < 0.
    changes, decisions = ar.sign_changes(q, mask, prior, taken, live)
    assert (int(changes), int(decisions)) == (1, 3)


def _path_policy(params, choice):
    """A deterministic actor on TinyWorkflow: at node p the label choice[p]."""
    def pi(state):
        _, legal = tw.WF.legal_actions(state, params)
        logp = jnp.where(jnp.arange(tw.K) == jnp.asarray(choice)[state.node], 0.0, NEG)
        return jnp.where(legal, logp, NEG), jnp.float32(0.0)
    return pi


def _main_trajectory(params, pi, qids):
    """The states a greedy actor visits from the root of each question: [N, ...] flat,
    live [N], taken [N] (T = 3 turns per episode)."""
    states, lives, takens = [], [], []
    s = tw.roots(qids)
    done = jnp.zeros(len(qids), bool)
    for _ in range(tw.WF.max_turns):
        logp, _ = jax.vmap(pi)(s)
        a = jnp.argmax(logp, -1)
        states.append(s)
        lives.append(~done)
        takens.append(a)
        cands, _ = jax.vmap(tw.WF.legal_actions, in_axes=(0, None))(s, params)
        nxt, _ = jax.vmap(tw.WF.step, in_axes=(0, 0, None))(
            s, jnp.take_along_axis(cands, a[:, None, None], 1)[:, 0], params)
        done = done | nxt.done
        s = nxt
    flat = jax.tree.map(lambda *x: jnp.stack(x, 1).reshape((-1,) + x[0].shape[1:]), *states)
    return flat, jnp.stack(lives, 1).reshape(-1), jnp.stack(takens, 1).reshape(-1)


def _work(params, pi, states, live, taken, key=0):
    return jax.jit(lambda k: ar.auxiliary_work(tw.WF, params, pi, states, live, taken, k))(
        jax.random.PRNGKey(key))


def test_a_deterministic_actor_scores_nothing_new_and_executes_its_path_once():
    """Main trajectory 0 -a1-> 2 -a0-> 5 -a0-> 6 of questions 0 and 1: every continuation
    follows it, so VinePPO decides only at 2 and 5 (main states: nothing newly scored)
    and executes the path's 3 edges once per question (cost edge + q: 20, 5, 2)."""
    params = tw.make_params()
    choice = np.zeros(tw.P, int)
    choice[0] = 1
    pi = _path_policy(params, choice)
    states, live, taken = _main_trajectory(params, pi, jnp.array([0, 1]))
    assert int(jnp.sum(live)) == 6
    m = {k: float(v) for k, v in _work(params, pi, states, live, taken).items()}
    assert m["states"] == 6
    assert m["vine/newly_scored"] == 0 and m["vine/scored"] == 4     # (q, 2), (q, 5)
    assert m["vine/t_env"] == pytest.approx((20 + 5 + 2) + (21 + 6 + 3))
    # ASCT executes each prefix of a question at most once: at most every edge (82 + 9 q).
    for rule in ("agentuct", "uniform"):
        assert 0 < m[f"{rule}/t_env"] <= (82 + 0 * 9) + (82 + 9)
    ps = ar.per_state(m)
    assert ps["vine/newly_scored_per_state"] == 0
    assert ps["vine/t_env_per_state"] == pytest.approx(57 / 6)


def test_a_uniform_actor_newly_scores_the_states_off_its_path():
    """The same main trajectory, continuations of a uniform actor: decisions off the path
    are at node 1 only (1's children and 9 are terminal), so the newly scored pairs are
    those of node 1, one per question whose continuations took a0 at the root."""
    params = tw.make_params()
    choice = np.zeros(tw.P, int)
    choice[0] = 1
    states, live, taken = _main_trajectory(params, _path_policy(params, choice),
                                           jnp.array([0, 1]))
    m = {k: float(v) for k, v in _work(params, tw.uniform_policy(tw.WF, params), states,
                                       live, taken, key=3).items()}
    # 12 root draws from 3 labels at each question: node 1 is reached (P = 1 - (2/3)^12).
    assert m["vine/newly_scored"] == 2
    assert m["vine/scored"] == 6                                      # (q, 1), (q, 2), (q, 5)
