"""asct_jax.envs.ragspace.simulator, the hidden question and the cost model, against plain
NumPy references of the package docstring: `question_features` (the Weyl difficulty, the
fold_in keys, the documented ranges, the cue accuracy) and `edge_cost_parts` / `edge_cost`
on every legal (stage, slot) of a grid of prefixes. The evidence and the answer:
test_simulator_evidence.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.envs.ragspace import simulator as sim
from asct_jax.envs.ragspace.spec import (CAL, CONTEXT, CONTROL, DATASETS, MAX_HOPS, MIX,
                                         QUERY, RERANK, WIDTH, Q, Qtype, R, RagSpaceParams,
                                         RagSpaceState, num_legal)

HOT = RagSpaceParams.small()
WIDTHS, CTXS = (3, 6), (2, 4)


@pytest.fixture(scope="module")
def feats():
    """question_features of qids [N] (params a traced pytree: cue_acc needs no recompile)."""
    f = jax.jit(jax.vmap(sim.question_features, in_axes=(0, None)))
    return lambda qids, p: jax.device_get(f(jnp.asarray(qids, jnp.int32), p))


# ---------------------------------------------------------------------------- question
def _weyl_diff(qid, params):
    u = ((np.asarray(qid, np.uint64) * 40503 + params.pool_seed * 7919) & 0xFFFF) / 65536.0
    return np.searchsorted(np.cumsum(MIX[params.dataset]["p_diff"])[:-1], u, side="right")


def test_features_have_the_state_dtypes_and_documented_ranges(feats):
    qids = np.arange(0, 4000, 7)
    for ds in DATASETS:
        f = feats(qids, HOT.replace(dataset=ds))
        assert set(f) == {"qtype", "diff", "hops", "lex", "rare", "late", "base", "cues",
                          "q_words", "q_tok", "idio"}
        assert set(f) <= set(RagSpaceState.__dataclass_fields__)
        assert f["base"].shape == (len(qids), MAX_HOPS) and f["idio"].shape == (len(qids), 9)
        assert f["cues"].shape == (len(qids), 2) and f["lex"].dtype == np.float32
        assert np.all(np.isin(f["qtype"], [Qtype.BRIDGE, Qtype.COMPARISON]))
        assert np.all(np.isin(f["diff"], [0, 1, 2])) and np.all(np.isin(f["cues"], [0, 1]))
        assert np.all((f["hops"] >= 2) & (f["hops"] <= 4))
        assert np.all(np.abs(f["lex"]) <= 1.0)
        assert np.all(~f["late"] | (f["qtype"] == Qtype.BRIDGE))     # late: bridges only
        assert np.all((f["q_words"] >= 12) & (f["q_words"] <= 30))
        assert np.all(f["q_words"] == np.round(f["q_words"]))
        np.testing.assert_array_equal(f["q_tok"], np.round(1.3 * f["q_words"]))
        assert np.all(f["idio"][:, 6] == 0.0) and np.all(f["idio"][:, [0, 7, 8]] != 0.0)
        np.testing.assert_array_equal(f["diff"], _weyl_diff(qids, HOT.replace(dataset=ds)))
    assert set(np.unique(feats(qids, HOT)["hops"])) == {2}                      # hotpot
    assert np.all(feats(qids, HOT.replace(dataset="musique"))["qtype"] == Qtype.BRIDGE)


@given(lo=st.integers(0, 60_000))
def test_weyl_difficulty_gives_every_id_range_the_mix(feats, lo):
    """Any 200 consecutive qids hold each difficulty's share up to 2 / 200 (a Weyl
    sequence of the golden-ratio multiplier 40503 / 2^16)."""
    diff = feats(np.arange(lo, lo + 200), HOT)["diff"]
    np.testing.assert_array_equal(diff, _weyl_diff(np.arange(lo, lo + 200), HOT))
    counts = np.bincount(diff, minlength=3)
    assert np.all(np.abs(counts - 200 * np.asarray(MIX["hotpot"]["p_diff"])) <= 2.0), counts


def test_features_follow_the_documented_fold_in_keys(feats):
    """key = fold_in(fold_in(PRNGKey(pool_seed), dataset index), qid), split 10 ways:
    hops k0, bridge k1, lex k2, rare k3, late k4, base k5, q_words k7, idio k8."""
    p = HOT.replace(dataset="musique", pool_seed=3)
    qids = np.arange(40, 72)
    f = feats(qids, p)
    m = MIX["musique"]
    for i, qid in enumerate(qids):
        k = jax.random.split(jax.random.fold_in(jax.random.fold_in(
            jax.random.PRNGKey(3), DATASETS.index("musique")), int(qid)), 10)
        bridge = bool(jax.random.bernoulli(k[1], m["p_bridge"]))
        lex = float(np.clip(float(jax.random.uniform(k[2], (), minval=-1.0, maxval=1.0))
                            + m["lex_shift"], -1, 1))
        base = (CAL["thr"][f["diff"][i]] + m["thr_shift"]
                + CAL["thr_sigma"] * np.asarray(jax.random.normal(k[5], (MAX_HOPS,))))
        assert f["hops"][i] == 2 + int(jax.random.choice(k[0], 3, p=jnp.asarray(m["p_hops"])))
        assert f["qtype"][i] == (Qtype.BRIDGE if bridge else Qtype.COMPARISON)
        assert f["lex"][i] == pytest.approx(lex, abs=1e-6)
        assert f["rare"][i] == bool(jax.random.bernoulli(k[3], m["p_rare"]))
        assert f["late"][i] == (bridge and bool(jax.random.bernoulli(k[4], m["p_late"])))
        np.testing.assert_allclose(f["base"][i], base, atol=1e-5)
        assert f["q_words"][i] == int(jax.random.randint(k[7], (), 12, 31))
        np.testing.assert_allclose(f["idio"][i, [0, 5, 7]],
                                   np.asarray(jax.random.normal(k[8], (9,)))[[0, 5, 7]])


def test_features_are_deterministic_and_depend_on_seed_and_dataset(feats):
    qids = np.arange(300)
    a, b = feats(qids, HOT), feats(qids, HOT)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["base"], feats(qids, HOT.replace(pool_seed=1))["base"])
    assert not np.array_equal(a["base"], feats(qids, HOT.replace(dataset="twowiki"))["base"])


def test_cue_accuracy_one_shows_the_truth_and_zero_its_opposite(feats):
    qids = np.arange(200)
    truth = None
    for acc, flip in ((1.0, False), (0.0, True)):
        f = feats(qids, HOT.replace(cue_acc=jnp.float32(acc)))
        truth = np.stack([f["lex"] <= 0.0, ~f["rare"]], axis=1).astype(np.int32)
        np.testing.assert_array_equal(f["cues"], 1 - truth if flip else truth)
    f = feats(qids, HOT)                                      # cue_acc 0.8
    assert 0.7 < np.mean(f["cues"] == truth) < 0.9


def test_question_id_must_be_a_scalar():
    with pytest.raises(AssertionError, match="rank"):
        sim.question_features(jnp.arange(2), HOT)


def test_every_valid_pool_seed_gives_a_question():
    p = HOT.replace(pool_seed=10 ** 6)
    p.validate()
    assert int(sim.question_features(jnp.int32(0), p)["diff"]) in (0, 1, 2)


# ---------------------------------------------------------------------------- cost model
def _ref_edge(stage, k, qry, ret, sel, wid, rounds, n_found, q_words, q_tok):
    """(words, [generator in, generator out, query embedding, reranker in]) of the package
    docstring's C_exec / T_env, one prefix at a time."""
    nq = 2 if qry == Q.DECOMPOSE else 1
    words, parts = 0.0, [0.0, 0.0, 0.0, 0.0]
    if stage == QUERY and k != Q.ORIGINAL:
        words = q_words + (CAL["Q2D_WORDS"] if k == Q.QUERY2DOC else 2 * CAL["SUBQ_WORDS"])
        parts[:2] = [q_tok + CAL["GEN_INSTR"],
                     CAL["Q2D_TOK"] if k == Q.QUERY2DOC else 2 * CAL["SUBQ_TOK"]]
    elif stage == WIDTH or (stage == CONTROL and k == 1):          # a retrieval round
        w = WIDTHS[k if stage == WIDTH else wid]
        found = 0 if stage == WIDTH else n_found
        rankings = 4 if ret == R.RRF else 1
        words = nq * rankings * CAL["POOL"] * w * CAL["PW"]
        words += nq * 2 * w * CAL["PW"] if sel == 1 else 0           # mmr re-reads 2w
        dense = {R.BM25: 0, R.RRF: 3}.get(ret, 1)
        q = {Q.ORIGINAL: q_tok, Q.QUERY2DOC: q_tok + CAL["Q2D_TOK"],
             Q.DECOMPOSE: 2 * CAL["SUBQ_TOK"]}[qry]
        parts[2] = dense * (q + nq * CAL["REFINE_TOK"] * found)
    elif stage == RERANK and k == 1:
        n = rounds * nq * WIDTHS[wid]
        words, parts[3] = n * CAL["PW"], n * CAL["RR_TOK"]
    elif stage == CONTEXT:
        c = min(CTXS[k], rounds * nq * WIDTHS[wid])
        words = c * CAL["PW"] + q_words
        parts[:2] = [q_tok + CAL["GEN_INSTR"] + c * CAL["PASS_TOK"], CAL["ANS_TOK"]]
    return words, parts


def _cost_grid():
    rng = np.random.default_rng(0)
    rows = [(stage, k, qry, ret, sel, wid, rounds, nf)
            for stage in range(CONTEXT + 1) for rounds in (1, 2, 3)
            for k in range(num_legal(stage, rounds, 6)) for qry in range(3)
            for ret in range(6) for sel in (0, 1) for wid in (0, 1) for nf in (0, 1, 2)]
    g = np.asarray(rows, np.int32).T
    q_words = rng.integers(12, 31, g.shape[1]).astype(np.float32)
    return (*g, q_words, np.round(1.3 * q_words))


def test_edge_cost_parts_match_the_cost_model_on_every_legal_prefix():
    grid = _cost_grid()
    words, parts = jax.device_get(jax.jit(sim.edge_cost_parts)(*grid))
    ref = [_ref_edge(*(x.item() for x in row)) for row in zip(*grid)]
    assert words.dtype == parts.dtype == np.float32 and parts.shape == (len(ref), 4)
    np.testing.assert_allclose(words, [w for w, _ in ref], rtol=1e-6)
    np.testing.assert_allclose(parts, [p for _, p in ref], rtol=1e-6)
    totals = jax.device_get(jax.jit(sim.edge_cost)(*grid))
    np.testing.assert_array_equal(totals[0], words)
    np.testing.assert_allclose(totals[1], parts.sum(-1), rtol=1e-6)
    assert sim.COST_PARTS == ("generator_input", "generator_output", "query_embedding",
                              "reranker_input")


def test_edge_cost_broadcasts_the_slots_against_a_scalar_prefix():
    """action_cost_parts' call: k [K, 1] against [] prefix fields -> [K, 1], [K, 1, 4]."""
    k = jnp.arange(5)[:, None]
    words, parts = sim.edge_cost_parts(WIDTH, k, Q.DECOMPOSE, R.RRF, 1, -1, 0, 0,
                                       jnp.float32(20.0), jnp.float32(26.0))
    assert words.shape == (5, 1) and parts.shape == (5, 1, 4)
    np.testing.assert_allclose(words[:2, 0], [2 * 4 * 4 * w * 100 + 2 * 2 * w * 100
                                              for w in WIDTHS])
    np.testing.assert_allclose(parts[:2, 0], [[0, 0, 3 * 32, 0]] * 2)
