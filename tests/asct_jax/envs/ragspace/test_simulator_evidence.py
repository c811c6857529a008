"""asct_jax.envs.ragspace.simulator, the evidence and the answer, against plain NumPy
references of the package docstring's equations: `after_retrieval` (l_h = base_h -
quality - bonus + selection penalty + gate - refinement; found iff exp(l_h) <= width at
rank ceil(exp(l_h)); the best (rank, list) kept per hop) and `answer` (the lists merged
round robin, keep / rerank, the first 2 / 4 passages as context, F1). Random prefixes
(every retriever, probe included) go through one jitted vmap per function."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.envs.ragspace import simulator as sim
from asct_jax.envs.ragspace.spec import CAL, CONTROL, MAX_HOPS, Q, Qtype, R, RagSpaceState

H = np.arange(MAX_HOPS)
WIDTHS, CTXS = (3, 6), (2, 4)


# ---------------------------------------------------------------------------- evidence
def _random_states(n, seed, rounds_lo):
    """[n] prefixes (NumPy dicts of the RagSpaceState fields): random question, choices
    (retrievers incl. the probe), evidence of the `rounds` (rounds_lo..3) rounds so far."""
    rng = np.random.default_rng(seed)
    hops = rng.integers(2, 5, n)
    qtype = rng.integers(0, 2, n)
    choice = np.stack([rng.integers(0, c, n) for c in (3, 6, 2, 2, 2, 2)], 1)
    rounds = rng.integers(rounds_lo, 4, n)
    n_lists = rounds * np.where(choice[:, 0] == Q.DECOMPOSE, 2, 1)
    found = (rng.random((n, MAX_HOPS)) < 0.5) & (H < hops[:, None]) & (rounds[:, None] > 0)
    return dict(
        key=np.zeros((n, 2), np.uint32), turn=np.zeros(n, np.int32), done=np.zeros(n, bool),
        qid=np.zeros(n, np.int32), node=np.zeros(n, np.int32),
        stage=np.full(n, CONTROL, np.int32), choice=choice.astype(np.int32),
        rounds=rounds.astype(np.int32), found=found,
        rank=np.where(found, rng.integers(1, 7, (n, MAX_HOPS)), 99).astype(np.int32),
        lst=np.where(found, rng.integers(0, 6, (n, MAX_HOPS)) % np.maximum(n_lists, 1)[:, None],
                     0).astype(np.int32),
        in_ctx=np.zeros((n, MAX_HOPS), bool), f1=np.zeros(n, np.float32),
        words=np.zeros(n, np.float32), aux=np.zeros(n, np.float32),
        qtype=qtype.astype(np.int32), diff=rng.integers(0, 3, n).astype(np.int32),
        hops=hops.astype(np.int32), lex=rng.uniform(-1, 1, n).astype(np.float32),
        rare=rng.random(n) < 0.4, late=(qtype == Qtype.BRIDGE) & (rng.random(n) < 0.5),
        base=rng.normal(0.5, 1.2, (n, MAX_HOPS)).astype(np.float32),
        cues=np.zeros((n, 2), np.int32), q_words=np.full(n, 20.0, np.float32),
        q_tok=np.full(n, 26.0, np.float32),
        idio=rng.normal(0, 1, (n, 9)).astype(np.float32))


def _row(states, i):
    return {k: v[i] for k, v in states.items()}


def _ref_log_rank(s, rnd):
    """[H] l_h = base_h - quality - bonus + selection penalty + gate - refinement."""
    qry, ret, sel = (int(x) for x in s["choice"][:3])
    lex, rare, idio, hops = float(s["lex"]), float(s["rare"]), s["idio"], int(s["hops"])
    bridge, late, found = s["qtype"] == Qtype.BRIDGE, bool(s["late"]), s["found"]
    q4 = [a + b * lex + c * rare + d * lex * rare + CAL["idio_ret"] * idio[i]
          for i, (a, b, c, d) in enumerate(CAL["qual"])]
    ra, rb, rc = CAL["rrf_mix"]
    out = []
    for h in range(MAX_HOPS):
        if ret == R.PROBE:
            a, b = CAL["qual"][R.BGE_M3][:2]
            answer_hop = h == hops - 1 or not bridge
            quality = (a + b * lex + CAL["idio_ret"] * idio[R.PROBE]
                       + CAL["probe_bonus"][int(answer_hop)])
        elif ret == R.RRF:
            quality = ra + rb * max(q4) + rc * np.mean(q4) + CAL["idio_ret"] * 0.5 * idio[4]
        else:
            quality = q4[ret]
        bonus = CAL["idio_query"] * idio[6 + qry]
        if qry == Q.QUERY2DOC:
            a = {R.BM25: CAL["q2d"][0], R.RRF: 0.5 * (CAL["q2d"][0] + CAL["q2d"][1])}.get(
                ret, CAL["q2d"][1])
            bonus += (a * max(-lex, 0) - CAL["q2d"][2] * max(lex, 0) - CAL["q2d"][3] * rare
                      + (CAL["q2d_chain"] if bridge and h > 0 and not late else 0))
        elif qry == Q.DECOMPOSE:
            bonus += (CAL["dec"][2] if not bridge else CAL["dec"][0] if h == 0
                      else 0.0 if late else CAL["dec"][1])
        if sel == 1:
            pen = CAL["mmr_pen"] if bridge else 0.0
        else:
            pen = CAL["dup_pen"][int(qry == Q.DECOMPOSE)] if not bridge and h == 1 else 0.0
        pred = h == 0 or found[h - 1]
        gate = CAL["chain_pen"][int(late)] if bridge and h > 0 and not pred else 0.0
        refine = 0.0
        if rnd >= 2:
            refine = (CAL["refine"][3] if found[h] else CAL["refine"][0] if bridge and h > 0
                      and pred else CAL["refine"][2] if not bridge and found[:hops].any()
                      else CAL["refine"][1])
        out.append(s["base"][h] - quality - bonus + pen + gate - refine)
    return np.asarray(out)


@pytest.fixture(scope="module")
def retrieved():
    """(states before, after_retrieval(state, rounds + 1)) of 400 random prefixes."""
    before = _random_states(400, seed=1, rounds_lo=0)
    after = jax.jit(jax.vmap(sim.after_retrieval))(RagSpaceState(**before),
                                                   jnp.asarray(before["rounds"] + 1))
    return before, jax.device_get(after)


def test_a_round_finds_hop_h_iff_exp_log_rank_fits_the_width(retrieved):
    before, after = retrieved
    checked = 0
    for i in range(len(before["hops"])):
        s, rnd = _row(before, i), int(before["rounds"][i]) + 1
        rho = np.exp(_ref_log_rank(s, rnd))
        w, nq = WIDTHS[s["choice"][3]], 2 if s["choice"][0] == Q.DECOMPOSE else 1
        near = np.abs(rho - np.round(rho)) < 1e-3                     # float32 ties: skip
        new = (H < s["hops"]) & (rho <= w)
        rank = np.clip(np.ceil(rho), 1, 6)
        lst = (rnd - 1) * nq + np.where(nq == 2, (2 * H) // s["hops"], 0)
        better = new & (~s["found"] | (rank < s["rank"]))
        ok = ~near
        np.testing.assert_array_equal((s["found"] | new)[ok], after.found[i][ok])
        np.testing.assert_array_equal(np.where(better, rank, s["rank"])[ok], after.rank[i][ok])
        np.testing.assert_array_equal(np.where(better, lst, s["lst"])[ok], after.lst[i][ok])
        checked += ok.sum()
    assert checked > 0.95 * 4 * len(before["hops"])
    assert 0.2 < after.found.mean() < 0.8                       # both outcomes exercised


def test_retrieval_keeps_evidence_and_only_finds_real_hops(retrieved):
    before, after = retrieved
    np.testing.assert_array_equal(after.rounds, before["rounds"] + 1)
    assert np.all(after.found >= before["found"])                 # never lost
    assert np.all(after.rank <= before["rank"])                   # the best rank is kept
    assert not np.any(after.found & (H >= before["hops"][:, None]))
    assert np.all((after.rank[after.found] >= 1) & (after.rank[after.found] <= 6))
    newly = after.found & ~before["found"]
    width = np.asarray(WIDTHS)[before["choice"][:, 3]][:, None]
    assert np.all((after.rank <= width)[newly])                   # found at rank <= width
    np.testing.assert_array_equal(after.qid, before["qid"])
    np.testing.assert_array_equal(after.base, before["base"])


# ---------------------------------------------------------------------------- answer
def _ref_answer(s, cx):
    """(in_ctx, F1): the lists merged round robin, the first 2 / 4 passages as context."""
    qry, wid, rerank = s["choice"][0], s["choice"][3], s["choice"][4] == 1
    n_lists = s["rounds"] * (2 if qry == Q.DECOMPOSE else 1)
    n_ctx = min(CTXS[cx], n_lists * WIDTHS[wid])
    pos = {h: (s["rank"][h] - 1) * n_lists + s["lst"][h] + 1 for h in H if s["found"][h]}
    order = sorted(pos, key=lambda h: (pos[h], h))
    in_ctx = np.zeros(MAX_HOPS, bool)
    for j, h in enumerate(order):
        ties = sum(pos[g] == pos[h] for g in order[:j])        # same slot: pushed back
        in_ctx[h] = (j + 1 if rerank else pos[h] + ties) <= n_ctx
    n_in, d = in_ctx.sum(), s["diff"]
    g = CAL["g0"] + (1 - CAL["g0"]) * (n_in / s["hops"]) ** CAL["gamma"]
    f1 = CAL["f_full"][d] * g - CAL["noise_pen"][d] * (n_ctx - n_in)
    return in_ctx, min(max(f1, 0.0), 1.0)


@pytest.fixture(scope="module")
def answer_fn():
    return jax.jit(jax.vmap(sim.answer))


def test_answer_context_and_f1_match_the_round_robin_model(answer_fn):
    states = _random_states(600, seed=2, rounds_lo=1)
    cx = np.random.default_rng(3).integers(0, 2, 600)
    in_ctx, f1 = jax.device_get(answer_fn(RagSpaceState(**states), jnp.asarray(cx)))
    assert in_ctx.shape == (600, MAX_HOPS) and f1.shape == (600,) and f1.dtype == np.float32
    for i in range(600):
        ref_in, ref_f1 = _ref_answer(_row(states, i), cx[i])
        np.testing.assert_array_equal(in_ctx[i], ref_in, err_msg=str(i))
        assert f1[i] == pytest.approx(ref_f1, abs=1e-6), i
    assert np.all(in_ctx <= states["found"]) and np.all((f1 >= 0) & (f1 <= 1))
    rr = states["choice"][:, 4] == 1
    assert 0 < in_ctx[rr].sum() and 0 < in_ctx[~rr].sum() < states["found"][~rr].sum()


def test_answer_by_hand_ties_noise_and_no_evidence(answer_fn):
    """Two hops at rank 1 of one list: the second is pushed to position 2, top2 holds
    both (F1 = f_full), top4 adds 2 noise passages. Decompose (2 lists), both at rank 1 of
    list 2: positions 2 and 3, top2 keeps hop 1 only, rerank moves both up. No evidence:
    F1 = f_full g0 - 4 noise_pen."""
    n = 5
    s = _random_states(n, seed=4, rounds_lo=1)
    s.update(hops=np.full(n, 2, np.int32), diff=np.zeros(n, np.int32),
             rounds=np.ones(n, np.int32), rank=np.ones((n, MAX_HOPS), np.int32),
             lst=np.asarray([[0] * 4] * 2 + [[1] * 4] * 3, np.int32),
             found=np.asarray([[1, 1, 0, 0]] * 4 + [[0, 0, 0, 0]], bool),
             choice=np.asarray([[0, 2, 0, 1, 0, -1]] * 2 + [[2, 2, 0, 1, 0, -1],
                               [2, 2, 0, 1, 1, -1], [0, 2, 0, 1, 0, -1]], np.int32))
    in_ctx, f1 = jax.device_get(answer_fn(RagSpaceState(**s), jnp.asarray([0, 1, 0, 0, 1])))
    ff, pen, g0 = CAL["f_full"][0], CAL["noise_pen"][0], CAL["g0"]
    half = ff * (g0 + (1 - g0) * 0.5 ** CAL["gamma"]) - pen
    np.testing.assert_array_equal(in_ctx[:, :2], [[1, 1], [1, 1], [1, 0], [1, 1], [0, 0]])
    np.testing.assert_allclose(f1, [ff, ff - 2 * pen, half, ff, ff * g0 - 4 * pen], rtol=1e-6)
    assert not in_ctx[:, 2:].any()
