"""Tests of `ragspace`, the JAX-native analogue of the RAGSpace workflow (HotpotQA-like).

Compiles are kept few: one module fixture jits the token-level step, the index-level
workflow runner and the policy runner.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.envs import PAD_ID, list_envs, make, module_of
from asct_jax.envs import ragspace as rs
from asct_jax.envs.tokenizer import decode, get_tokenizer

BASE = list(rs.BASE_WORKFLOW)                 # original bge_m3 relevance 6 continue stop keep top4
N_LEGAL = {rs.QUERY: 3, rs.RETRIEVER: 5, rs.SELECTION: 2, rs.WIDTH: 2, rs.RERANK: 2,
           rs.CONTEXT: 2}


def tree_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


class Harness:
    def __init__(self, **overrides):
        self.env, self.p = make("ragspace", **overrides)
        env, p = self.env, self.p
        self.start = jax.jit(lambda k, q: env.reset_question(k, q, p))
        self.step = jax.jit(lambda s, a: env.step(s, a, p))
        self.legal = jax.jit(lambda s: env.legal_actions(s, p))
        self.costs = jax.jit(lambda s: env.action_costs(s, p))
        self.observe = jax.jit(lambda s: env.observe(s, p))

    def play(self, qid, slots, key=0):
        """States and timesteps of question `qid` under slot sequence `slots` (tokens)."""
        s = self.start(jax.random.PRNGKey(key), jnp.int32(qid))
        out = [(s, None)]
        for k in slots:
            cands, _ = self.legal(s)
            s, ts = self.step(s, cands[k])
            out.append((s, ts))
        return out


@pytest.fixture(scope="module")
def h():
    return Harness()


def test_registered_and_named_as_analogue():
    assert "ragspace" in list_envs() and module_of("ragspace") is rs
    assert "analogue" in rs.__doc__ and "neither RAGSpace nor HotpotQA" in rs.__doc__
    assert len(get_tokenizer().get_vocab()) <= 1024


def test_bad_field_is_one_line_error():
    with pytest.raises(ValueError) as e:
        make("ragspace", size="small", bad_field=1)
    msg = str(e.value)
    assert "\n" not in msg and "'bad_field'" in msg and "allowed fields" in msg
    for field, value in (("dataset", "nq"), ("split", "dev"), ("probe_description", "x")):
        with pytest.raises(ValueError, match=field) as e:
            make("ragspace", **{field: value})
        assert "\n" not in str(e.value)


def test_tree_counts_and_node_tracking(h):
    tree = h.env.workflow(h.p)
    children, terminal = np.asarray(tree.children), np.asarray(tree.terminal)
    assert children.shape == (1489, 5) and terminal.sum() == 720
    assert np.asarray(tree.depth).max() == 9 and rs.workflow_actions().shape == (720, 9)
    tok = np.asarray(tree.edge_tokens)
    assert np.all(tok[children < 0] == 0) and np.all(tok >= 0)
    assert np.all(children[terminal] == -1)
    # the state's node after each step is the tree child of the previous node
    for slots in (BASE, [2, 4, 1, 0, 1, 1, 0, 1, 0], [1, 0, 0, 0, 0, 0, 1]):
        run = h.play(2400, slots)
        for (s0, _), (s1, _), k in zip(run, run[1:], slots):
            assert int(h.env.workflow_node(s1, h.p)) == children[int(s0.node), k]
            assert int(h.env.question_id(s1, h.p)) == 2400
        assert terminal[int(run[-1][0].node)] and bool(run[-1][1].done)
    assert h.env.num_questions(h.p) == 2800 and np.all(h.env.restorable(run[0][0], h.p))


def test_legal_sets_per_stage_and_round_three_only_stop(h):
    run = h.play(2401, [0, 2, 0, 0, 1, 1])       # ... width, continue, continue: round 3
    for s, _ in run:
        cands, legal = h.legal(s)
        legal = np.asarray(legal)
        stage = int(s.stage)
        n = 1 if (stage == rs.CONTROL and int(s.rounds) == 3) else N_LEGAL.get(stage, 2)
        assert legal.tolist() == [True] * n + [False] * (5 - n), stage
        names = [decode(c).replace("<eos>", "").strip() for c in np.asarray(cands)[legal]]
        labels = [lab for lab, _ in rs.LABELS[stage]][:n]
        assert names == labels
        costs = np.asarray(h.costs(s))
        assert np.all(costs[~legal] == 0)
    last = run[-1][0]
    assert int(last.stage) == rs.CONTROL and int(last.rounds) == 3
    cands, _ = h.legal(last)
    s, ts = h.step(last, cands[1])               # continue at round 3: nothing happens
    assert int(s.rounds) == 3 and int(s.node) == int(last.node)
    assert "nothing happens" in decode(ts.feedback)


def test_determinism_and_key_independence(h):
    a = h.play(2402, BASE, key=0)
    b = h.play(2402, BASE, key=0)
    c = h.play(2402, BASE, key=123)
    assert all(tree_equal(x, y) for x, y in zip(a, b))
    for (sa, ta), (sc, tc) in zip(a[1:], c[1:]):
        assert tree_equal(sa.replace(key=sc.key), sc)
        assert tree_equal(ta, tc)
    s_a, s_c = (h.env.reset(jax.random.PRNGKey(5), h.p)[0] for _ in range(2))
    assert tree_equal(s_a, s_c)
    lo, hi = h.p.split_range()
    assert lo <= int(s_a.qid) < hi and (lo, hi) == (0, 2000)


def test_utility_and_execution_words(h):
    run = h.play(2403, BASE)
    s, ts = run[-1]
    qw = float(s.q_words)
    assert float(s.words) == 2400 + 2400 + 4 * 100 + qw     # 2 rounds x 1 x 1 x 4 x 6 x 100
    u = float(s.f1) - 0.1 * float(s.words) / 4096
    assert float(ts.reward) == pytest.approx(u) and float(ts.info["utility"]) == pytest.approx(u)
    assert float(ts.info["score"]) == pytest.approx(u)
    assert sum(float(t.reward) for _, t in run[1:]) == pytest.approx(u)
    assert all(float(t.reward) == 0 for _, t in run[1:-1])
    # decompose / rrf / mmr / 3 / stop / rerank / top2
    s = h.play(2403, [2, 4, 1, 0, 0, 1, 0])[-1][0]
    qw = float(s.q_words)
    query = qw + 2 * 12                                       # sub-question generation
    retrieval = 2 * 4 * 4 * 3 * 100 + 2 * 2 * 3 * 100          # queries x rankings x pool; mmr
    assert float(s.words) == query + retrieval + 6 * 100 + 2 * 100 + qw
    assert set(ts.info) >= {"utility", "f1", "exec_words", "score", "success", "recall",
                            "rounds", "difficulty", "qtype"}


def test_action_costs_are_the_charged_aux_tokens(h):
    run = h.play(2404, [1, 3, 0, 1, 1, 1, 0, 1, 1])
    total = 0.0
    for (s0, _), (s1, _), k in zip(run, run[1:], [1, 3, 0, 1, 1, 1, 0, 1, 1]):
        c = float(np.asarray(h.costs(s0))[k])
        assert float(s1.aux) - float(s0.aux) == pytest.approx(c)
        total += c
    assert 100 < total < 2000 and float(run[-1][0].aux) == pytest.approx(total)


def test_action_cost_parts_split_the_aux_tokens_by_category(h):
    """action_cost_parts: the Table 3 categories, summing to action_costs at every state of
    a workflow; by hand at the query stage (query2doc: question + 30 instruction tokens in,
    130 out; decompose: 2 x 16 out) and at the answer (8 tokens out)."""
    slots = [1, 3, 0, 1, 1, 1, 0, 1, 1]
    parts_of = jax.jit(lambda s: h.env.action_cost_parts(s, h.p))
    run = h.play(2404, slots)
    for s, _ in run[:-1]:
        np.testing.assert_allclose(np.asarray(parts_of(s)).sum(1), np.asarray(h.costs(s)),
                                   rtol=1e-6)
    assert h.env.cost_parts == rs.COST_PARTS and len(rs.COST_PARTS) == 4
    s0 = run[0][0]
    q = float(s0.q_tok)
    np.testing.assert_allclose(np.asarray(parts_of(s0))[:3],
                               [[0, 0, 0, 0], [q + 30, 130, 0, 0], [q + 30, 32, 0, 0]])
    last = np.asarray(parts_of(run[-2][0]))                       # the context stage
    assert np.all(last[:2, 1] == 8) and np.all(last[:2, 2:] == 0) and np.all(last[:2, 0] > q)


def test_difficulty_mix_and_transfer_sets():
    params = {d: make("ragspace", dataset=d)[1] for d in rs.DATASETS}
    n = {"hotpot": 5000, "twowiki": 2000, "musique": 2000}
    feats = jax.device_get(jax.jit(lambda: {
        d: jax.vmap(lambda q, p=p: rs.question_features(q, p))(jnp.arange(n[d]))
        for d, p in params.items()})())
    hot, two, mus = feats["hotpot"], feats["twowiki"], feats["musique"]
    mix = np.bincount(hot["diff"], minlength=3) / 5000
    assert np.all(np.abs(mix - [0.19, 0.64, 0.17]) <= 0.02), mix
    assert set(np.unique(hot["hops"])) == {2} and 0.7 < np.mean(hot["qtype"] == 0) < 0.9
    assert set(np.unique(mus["hops"])) == {2, 3, 4}
    assert np.all(np.abs(np.bincount(mus["hops"])[2:] / 2000 - [0.34, 0.33, 0.33]) < 0.04)
    assert np.mean(two["qtype"] == 1) > np.mean(hot["qtype"] == 1) + 0.2
    assert np.mean(two["diff"] == 2) > np.mean(hot["diff"] == 2) + 0.1
    assert not np.array_equal(two["base"], hot["base"][:2000])


def test_probe_variants_change_only_the_description():
    """Every table but the descriptions is the same, and so is the run; the observations
    differ only by A's description words."""
    envs = {d: make("ragspace", probe=True, probe_description=d) for d in rs.PROBE_DESCRIPTIONS}
    ref_env, ref_p = envs["name"]
    assert ref_env.num_actions == 6
    assert np.asarray(ref_env.workflow(ref_p).terminal).sum() == 864   # 3 6 2 2 3 2 2
    tables = [k for k, v in vars(ref_env).items() if isinstance(v, jax.Array)]
    for env, _ in envs.values():
        for k in tables:
            a, b = np.asarray(getattr(env, k)), np.asarray(getattr(ref_env, k))
            if k == "t_desc":
                a, b = a.copy(), b.copy()
                a[rs.RETRIEVER, rs.R.PROBE, 1:] = b[rs.RETRIEVER, rs.R.PROBE, 1:] = 0
            assert np.array_equal(a, b), k
    hh = Harness(probe=True, probe_description="name")
    run = hh.play(2405, [0, 5, 0, 0, 0, 1, 0])             # ... retriever A ...
    assert bool(run[-1][0].done) and int(run[-1][0].choice[1]) == rs.R.PROBE
    states = jax.tree.map(lambda *x: jnp.stack(x), *[s for s, _ in run])
    vocab = get_tokenizer().get_vocab()
    ref_o = np.asarray(jax.vmap(lambda s: ref_env.observe(s, ref_p))(states))
    for desc, (env, p) in envs.items():
        obs = np.asarray(jax.jit(jax.vmap(lambda s: env.observe(s, p)))(states))
        words = [vocab[w] for w in rs.PROBE_DESCRIPTIONS[desc].split()]
        for t, (o, o_ref) in enumerate(zip(obs, ref_o)):
            if int(run[t][0].stage) == rs.RETRIEVER:
                i = int(np.flatnonzero(o == vocab[rs.PROBE_LABEL])[0])
                assert o[i + 1: i + 1 + len(words)].tolist() == words
                stripped = np.concatenate([o[: i + 1], o[i + 1 + len(words):]])
                assert np.array_equal(stripped[stripped != PAD_ID], o_ref[o_ref != PAD_ID])
            else:
                assert np.array_equal(o, o_ref)


def test_observation_shows_evidence_and_descriptions(h):
    run = h.play(2406, BASE[:4])
    s, ts = run[-1]
    text = decode(ts.observation)
    assert "stage control" in text and "round 1" in text and "evidence h1" in text
    assert "stop answer from evidence" in text and "continue refine query search" in text
    assert "chosen original bge_m3 relevance 6" in text
    s0 = run[0][0]
    t0 = decode(h.observe(s0))
    assert "original question text query2doc expand with generated passages" in t0
    _, p = make("ragspace", describe=False)
    env_n, _ = make("ragspace", describe=False)
    assert decode(env_n.observe(s0, p)).endswith("<sep> original query2doc decompose")
    assert int(np.sum(np.asarray(ts.observation) != PAD_ID)) <= h.env.obs_len <= 64


@pytest.mark.slow
def test_policies_and_adaptive_beats_every_fixed_workflow(h):
    env, p = make("ragspace", split="test")
    qids = jnp.arange(*p.split_range(), dtype=jnp.int32)
    flows = jnp.asarray(rs.workflow_actions())

    @jax.jit
    def run(qids, flows):
        grid = jax.vmap(jax.vmap(lambda q, a: rs.run_workflow(env, p, q, a), (None, 0)),
                        (0, None))(qids, flows)
        pol = lambda f: jax.vmap(lambda q: rs.run_policy(env, p, q, f))(qids)
        return grid["utility"], pol(rs.expert_policy), pol(rs.base_policy)

    U, expert, base = jax.device_get(run(qids, flows))
    base_i = [i for i, a in enumerate(np.asarray(flows)) if list(a[:8]) == BASE][0]
    assert np.allclose(base["utility"], U[:, base_i])
    assert expert["utility"].mean() > U.mean(0).max() + 0.02       # beats all 720 fixed
    assert U.max(1).mean() > expert["utility"].mean()              # the oracle is above
    assert expert["exec_words"].mean() < base["exec_words"].mean()
    assert 0.5 < base["utility"].mean() < 0.62 and 0.64 < base["f1"].mean() < 0.76
    assert 4800 < base["exec_words"].mean() < 5600
    # the token-level protocol agrees with the index-level runner; random is legal
    key = jax.random.PRNGKey(0)
    s = h.start(key, jnp.int32(2407))
    for t in range(9):
        a = rs.random_policy(s, h.p, jax.random.fold_in(key, t))
        cands, legal = h.legal(s)
        assert bool(legal[a]) or bool(s.done)
        s, ts = h.step(s, cands[a])
    assert bool(ts.done)
