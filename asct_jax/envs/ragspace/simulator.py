"""The simulator of `ragspace`: the hidden question, the execution-cost model (words
C_exec, auxiliary tokens T_env), the evidence of a retrieval round and the answer's F1
(equations: the package docstring)."""
from __future__ import annotations

from typing import Dict, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.ragspace.spec import (CAL, CONTEXT, CONTROL, DATASETS, MAX_HOPS, MIX,
                                         QUERY, RERANK, WIDTH, Q, Qtype, R, RagSpaceParams,
                                         RagSpaceState)


# ---------------------------------------------------------------------------- question
def question_features(qid: chex.Array, params: RagSpaceParams) -> Dict[str, chex.Array]:
    """The hidden question `qid` ([] int32): dict of the RagSpaceState question fields.

    Deterministic in (pool_seed, dataset, qid). The difficulty is a Weyl sequence over
    qid (every contiguous id range has the dataset's mix up to ~1 / n); the rest comes
    from jax.random.fold_in(PRNGKey(pool_seed), dataset, qid).
    """
    m = MIX[params.dataset]
    qid = jnp.asarray(qid, jnp.int32)
    chex.assert_rank(qid, 0)
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(params.pool_seed),
                                                DATASETS.index(params.dataset)), qid)
    k = jax.random.split(key, 10)
    weyl = lambda mult: ((qid.astype(jnp.uint32) * jnp.uint32(mult)
                          + jnp.uint32(params.pool_seed * 7919 % 65536)) & jnp.uint32(0xFFFF)
                         ).astype(jnp.float32) / 65536.0   # u = frac(qid * mult / 2^16)
    # (the seed's offset taken mod 2^16 first: the same u, and no uint32 overflow)
    diff = jnp.searchsorted(jnp.cumsum(jnp.asarray(m["p_diff"]))[:-1], weyl(40503),
                            side="right").astype(jnp.int32)
    hops = 2 + jax.random.choice(k[0], 3, p=jnp.asarray(m["p_hops"])).astype(jnp.int32)
    bridge = jax.random.bernoulli(k[1], m["p_bridge"])
    lex = jnp.clip(jax.random.uniform(k[2], (), minval=-1.0, maxval=1.0) + m["lex_shift"],
                   -1.0, 1.0)
    rare = jax.random.bernoulli(k[3], m["p_rare"])
    late = bridge & jax.random.bernoulli(k[4], m["p_late"])
    base = (jnp.asarray(CAL["thr"])[diff] + m["thr_shift"]
            + CAL["thr_sigma"] * jax.random.normal(k[5], (MAX_HOPS,)))  # thr + sigma * N(0,1)
    truth = jnp.stack([lex <= 0.0, ~rare]).astype(jnp.int32)     # 0 lexical / 0 rare
    flip = ~jax.random.bernoulli(k[6], params.cue_acc, (2,))
    q_words = jax.random.randint(k[7], (), 12, 31).astype(jnp.float32)
    idio = jax.random.normal(k[8], (9,))          # retrievers (6), query formulations (3)
    return dict(qtype=jnp.where(bridge, Qtype.BRIDGE, Qtype.COMPARISON).astype(jnp.int32),
                diff=diff, hops=hops, lex=lex.astype(jnp.float32), rare=rare, late=late,
                base=base.astype(jnp.float32), cues=jnp.where(flip, 1 - truth, truth),
                q_words=q_words, q_tok=jnp.round(1.3 * q_words),
                idio=idio.at[6].set(0.0).astype(jnp.float32))   # original: no idiosyncrasy


# ---------------------------------------------------------------------------- cost model
def _n_queries(qry):
    return jnp.where(qry == Q.DECOMPOSE, 2, 1)


def _width(wid):
    return jnp.where(wid == 0, 3, 6)


def _ctx(cx):
    return jnp.where(cx == 0, 2, 4)


def _n_pass(rounds, qry, wid):
    """Passages in the merged set: rounds * queries * width."""
    return rounds * _n_queries(qry) * _width(wid)


def _round_words(qry, ret, sel, wid):
    """Execution words of one retrieval round."""
    n_rank = jnp.where(ret == R.RRF, 4, 1)
    w = _width(wid)
    read = _n_queries(qry) * n_rank * CAL["POOL"] * w * CAL["PW"]   # queries x rankings x pool
    mmr = jnp.where(sel == 1, _n_queries(qry) * 2 * w * CAL["PW"], 0)  # mmr re-reads 2w
    return (read + mmr).astype(jnp.float32)


def _round_aux(qry, ret, q_tok, n_found):
    """Query-embedding tokens of one round: dense rankings x tokens of the queries."""
    n_dense = jnp.where(ret == R.BM25, 0, jnp.where(ret == R.RRF, 3, 1))
    q = jnp.where(qry == Q.ORIGINAL, q_tok, jnp.where(qry == Q.QUERY2DOC,
                                                      q_tok + CAL["Q2D_TOK"],
                                                      2 * CAL["SUBQ_TOK"]))
    q = q + _n_queries(qry) * CAL["REFINE_TOK"] * n_found        # evidence titles appended
    return (n_dense * q).astype(jnp.float32)


# The auxiliary-token categories of the ASCT paper's Table 3 (`edge_cost_parts`).
COST_PARTS = ("generator_input", "generator_output", "query_embedding", "reranker_input")


def edge_cost_parts(stage, k, qry, ret, sel, wid, rounds, n_found, q_words, q_tok):
    """(execution words [...], auxiliary tokens by category [..., 4]) of taking slot k at a
    prefix; elementwise. The categories (COST_PARTS, Table 3): generator input (query2doc
    / decompose instruction + question; the answer's question + context), generator output
    (the generated passage / sub-questions; the answer), query embedding (dense rankings x
    query tokens), reranker input (the merged set).

    stage, k, qry, ret, sel, wid (the prefix's choices, any value where unset), rounds,
    n_found (hops found so far), q_words, q_tok: broadcastable arrays.
    """
    q2d, dec = k == Q.QUERY2DOC, k == Q.DECOMPOSE
    w_query = jnp.where(q2d, q_words + CAL["Q2D_WORDS"],
                        jnp.where(dec, q_words + 2 * CAL["SUBQ_WORDS"], 0.0))
    t_query_in = jnp.where(q2d | dec, q_tok + CAL["GEN_INSTR"], 0.0)
    t_query_out = jnp.where(q2d, CAL["Q2D_TOK"], jnp.where(dec, 2 * CAL["SUBQ_TOK"], 0.0))
    wid_now = jnp.where(stage == WIDTH, k, wid)
    n_ret = (stage == WIDTH) | ((stage == CONTROL) & (k == 1))   # a retrieval round runs
    w_ret = _round_words(qry, ret, sel, wid_now)
    t_ret = _round_aux(qry, ret, q_tok, jnp.where(stage == WIDTH, 0, n_found))
    n_pass = _n_pass(rounds, qry, wid)
    w_rr = n_pass * CAL["PW"]                                     # reranker reads the set
    t_rr = n_pass * CAL["RR_TOK"]
    c = jnp.minimum(_ctx(k), n_pass)
    w_gen = c * CAL["PW"] + q_words                               # context + question
    t_gen_in = q_tok + CAL["GEN_INSTR"] + c * CAL["PASS_TOK"]
    is_query, is_rr, is_gen = stage == QUERY, (stage == RERANK) & (k == 1), stage == CONTEXT
    words = jnp.select([is_query, n_ret, is_rr, is_gen], [w_query, w_ret, w_rr, w_gen], 0.0)
    zero = jnp.zeros_like(words)
    parts = jnp.stack([
        jnp.select([is_query, is_gen], [t_query_in, t_gen_in], 0.0) + zero,
        jnp.select([is_query, is_gen], [t_query_out, CAL["ANS_TOK"] + zero], 0.0) + zero,
        jnp.where(n_ret, t_ret, 0.0) + zero,
        jnp.where(is_rr, t_rr, 0.0) + zero], axis=-1)
    return words.astype(jnp.float32), parts.astype(jnp.float32)


def edge_cost(stage, k, qry, ret, sel, wid, rounds, n_found, q_words, q_tok):
    """(execution words, auxiliary tokens) of taking slot k at a prefix; elementwise (the
    tokens: the sum of `edge_cost_parts`' categories)."""
    words, parts = edge_cost_parts(stage, k, qry, ret, sel, wid, rounds, n_found, q_words,
                                   q_tok)
    return words, jnp.sum(parts, axis=-1)


# ---------------------------------------------------------------------------- evidence
def _quality(s: RagSpaceState, ret) -> chex.Array:
    """[H] log-rank improvement of retriever `ret` for the question of `s`."""
    a, b, c, d = (jnp.asarray(x, jnp.float32) for x in zip(*CAL["qual"]))
    q4 = (a + b * s.lex + c * s.rare + d * s.lex * s.rare
          + CAL["idio_ret"] * s.idio[:4])                        # [4] a + b lex + c rare + ...
    ra, rb, rc = CAL["rrf_mix"]
    rrf = ra + rb * jnp.max(q4) + rc * jnp.mean(q4) + CAL["idio_ret"] * 0.5 * s.idio[4]
    h = jnp.arange(MAX_HOPS)
    answer_hop = (h == s.hops - 1) | (s.qtype == Qtype.COMPARISON)
    probe = (a[R.BGE_M3] + b[R.BGE_M3] * s.lex + CAL["idio_ret"] * s.idio[R.PROBE]
             + jnp.where(answer_hop, CAL["probe_bonus"][1], CAL["probe_bonus"][0]))
    q = jnp.concatenate([q4, rrf[None]])[jnp.minimum(ret, R.RRF)]
    return jnp.where(ret == R.PROBE, probe, q)


def _round(s: RagSpaceState, rnd) -> Tuple[chex.Array, chex.Array, chex.Array]:
    """Retrieval round `rnd` (1-based) of the prefix of `s`: found [H], rank [H], list [H]."""
    h = jnp.arange(MAX_HOPS)
    qry, ret, sel, wid = s.choice[0], s.choice[1], s.choice[2], s.choice[3]
    chain = s.qtype == Qtype.BRIDGE
    comp = ~chain
    pred = jnp.concatenate([jnp.ones((1,), bool), s.found[:-1]])  # hop h - 1 found before
    q2a, q2b, q2c, q2d = CAL["q2d"]
    da, db, dc = CAL["dec"]
    q2a = jnp.where(ret == R.BM25, q2a, jnp.where(ret == R.RRF, 0.5 * (q2a + q2b), q2b))
    b_q2d = (q2a * jnp.maximum(-s.lex, 0.0) - q2c * jnp.maximum(s.lex, 0.0) - q2d * s.rare
             + jnp.where(chain & (h > 0) & ~s.late, CAL["q2d_chain"], 0.0))  # helps paraphrase
    b_dec = jnp.where(comp, dc, jnp.where(h == 0, da, jnp.where(s.late, 0.0, db)))
    bonus = (jnp.select([qry == Q.QUERY2DOC, qry == Q.DECOMPOSE], [b_q2d, b_dec], 0.0)
             + CAL["idio_query"] * s.idio[6 + qry])                # + idiosyncratic fit
    dup = jnp.where(qry == Q.DECOMPOSE, CAL["dup_pen"][1], CAL["dup_pen"][0])
    pen_sel = jnp.where(sel == 1, jnp.where(comp, 0.0, CAL["mmr_pen"]),
                        jnp.where(comp & (h == 1), dup, 0.0))    # relevance crowds entity 2
    gate = jnp.where(chain & (h > 0) & ~pred,
                     jnp.where(s.late, CAL["chain_pen"][1], CAL["chain_pen"][0]), 0.0)
    other = jnp.any(s.found & (h < s.hops)) & ~s.found           # comparison: one entity known
    refine = jnp.where(rnd >= 2, jnp.select(                      # titles re-find found hops
        [s.found, chain & (h > 0) & pred, comp & other],
        [CAL["refine"][3], CAL["refine"][0], CAL["refine"][2]], CAL["refine"][1]), 0.0)
    ell = s.base - _quality(s, ret) - bonus + pen_sel + gate - refine   # log-rank l_h
    rho = jnp.exp(ell)
    found = (h < s.hops) & (rho <= _width(wid))                   # found iff exp(l_h) <= w
    rank = jnp.clip(jnp.ceil(rho), 1, 6).astype(jnp.int32)
    sub = jnp.where(qry == Q.DECOMPOSE, (2 * h) // s.hops, 0)     # sub-query of hop h
    lst = ((rnd - 1) * _n_queries(qry) + sub).astype(jnp.int32)
    return found, rank, lst


def after_retrieval(s: RagSpaceState, rnd) -> RagSpaceState:
    """`s` after retrieval round `rnd`: finds merged, best (rank, list) kept per hop."""
    found, rank, lst = _round(s, rnd)
    better = found & (~s.found | (rank < s.rank))
    return s.replace(found=s.found | found, rank=jnp.where(better, rank, s.rank),
                     lst=jnp.where(better, lst, s.lst), rounds=jnp.asarray(rnd, jnp.int32))


def answer(s: RagSpaceState, cx) -> Tuple[chex.Array, chex.Array]:
    """(in_ctx [H] bool, F1 []) of answering from context `cx` (0 top2, 1 top4)."""
    h = jnp.arange(MAX_HOPS)
    qry, wid, rr = s.choice[0], s.choice[3], s.choice[4] == 1
    L = s.rounds * _n_queries(qry)
    n_ctx = jnp.minimum(_ctx(cx), _n_pass(s.rounds, qry, wid))
    pos = (s.rank - 1) * L + s.lst + 1                            # round robin over L lists
    pos = jnp.where(s.found, pos, 10_000)
    before = (pos[None, :] < pos[:, None]) | ((pos[None, :] == pos[:, None])
                                             & (h[None, :] < h[:, None]))
    order = jnp.sum(before & s.found[None, :], axis=1)           # found hops ahead of h
    ties = jnp.sum((pos[None, :] == pos[:, None]) & (h[None, :] < h[:, None])
                   & s.found[None, :], axis=1)
    in_ctx = s.found & jnp.where(rr, order + 1 <= n_ctx, pos + ties <= n_ctx)
    n_in = jnp.sum(in_ctx)
    noise = n_ctx - n_in
    frac = n_in / s.hops
    g = CAL["g0"] + (1 - CAL["g0"]) * frac ** CAL["gamma"]      # g0 + (1 - g0) frac^gamma
    f1 = (jnp.asarray(CAL["f_full"])[s.diff] * g
          - jnp.asarray(CAL["noise_pen"])[s.diff] * noise)       # f_full g - pen noise
    return in_ctx, jnp.clip(f1, 0.0, 1.0).astype(jnp.float32)
