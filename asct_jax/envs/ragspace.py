"""`ragspace`: a JAX-native analogue of the ASCT paper's RAGSpace workflow on HotpotQA-like
multi-hop questions (an analogue: neither RAGSpace nor HotpotQA; no corpus, no model).

The actor composes a staged retrieval workflow (the paper's Table 1); each decision picks
one label among the K = 5 candidate slots of the current stage (a legal mask per stage):

  stage      labels (slot order)                           executes
  query      original, query2doc, decompose (2 queries)    query2doc / decompose generation
  retriever  bm25, e5, bge_m3 (hybrid), qwen3_embed, rrf   -
             (+ A with `probe`: K = 6)
  selection  relevance, mmr                                -
  width      3, 6 (passages per query)                     retrieval round 1
  control    stop, continue (rounds < 3; round 3: stop)    continue: round + 1 with a query
                                                           refined from the evidence, same
                                                           retriever / selection / width
  rerank     keep, rerank                                  reranker
  context    top2, top4                                    answer generation (terminal)

At most 9 decisions, 720 complete workflows, 1489 prefixes (`workflow` enumerates them;
the state's `node` is its prefix, updated by table lookup).

The hidden question (`question_features`) is a deterministic function of
(pool_seed, dataset, qid): type (bridge / comparison), difficulty (easy / medium / hard,
hotpot 19 / 64 / 17 %), hops, wording lexicality `lex` in [-1, 1], rare entities, a
`late` bridge (hop h > 1 only findable once hop h - 1 is found), per-hop thresholds,
idiosyncratic fits of each retriever and query formulation, two noisy cue words. Nothing
else is random: the state after a prefix is a function of (qid, prefix).

Evidence. A retrieval round gives each hop h a log-rank (`_round`, constants in CAL)
    l_h = base_h - quality(retriever | lex, rare) - bonus(query, hop) + selection penalty
          + gate (bridge entity unknown) - refinement (rounds >= 2)
and finds its supporting passage at rank r_h = ceil(exp(l_h)) iff exp(l_h) <= width.
bm25 suits lexical wording and rare entities, e5 paraphrase, bge_m3 is the robust hybrid,
qwen3_embed a strong dense model, rrf fuses the four (4 rankings' words); query2doc helps
paraphrased wording (most with bm25), decompose the 2nd hop of a bridge and both entities
of a comparison; relevance crowds a comparison's 2nd entity out (mmr does not). The
refined query of round >= 2 carries the found titles (found hops re-found on top) and,
for a bridge, the bridge entity once hop h - 1 is found. Lists of all queries and rounds
merge round robin: list j of L, rank r -> position (r - 1) L + j + 1; `keep` leaves that
order, `rerank` moves found passages to the top; the context is the first 2 or 4. With
n_in of H hops in the context and `noise` other passages in it:
    F1 = f_full[diff] * (g0 + (1 - g0) (n_in / H)^gamma) - noise_pen[diff] * noise.

Execution words C_exec (as the paper counts them): each query's ranking reads
POOL * width corpus passages of PW words (decompose: 2 queries, rrf: 4 rankings), mmr
re-reads its 2 * width candidates, rerank the merged set, generation the answer context
and the question (plus the query2doc passage or the sub-questions):
    U = F1 - lam * C_exec / 4096;   reward 0 per step, U at the terminal step.
Auxiliary tokens T_env (`action_costs`, a separate ledger, ~300 per workflow): generator
input + output (query2doc, decompose, answer), query-embedding tokens of the dense
rankings (per query), reranker input.

Calibration (test split, `python -m experiments.ragspace_landscape --all`; U / F1 /
words): hotpot Base 0.563 / 0.690 / 5221, best fixed 0.607, expert 0.648 / 0.706 / 2351,
oracle 0.709; the expert (observation only) beats all 720 fixed workflows on every
dataset. Base = original / bge_m3 / relevance / 6 / continue once / keep / top4.

Observation: question type, hops, two noisy cue words (wording lexical / paraphrase,
entities rare / common), the stage, the labels chosen so far, the round, the evidence per
hop (found / missed), each legal label with its description (`describe`). Datasets:
"hotpot" (2 hops), "twowiki" (more comparisons, lexical, harder), "musique" (2/3/4 hops,
all chains, harder). `probe` adds retriever A (answer-bearing passages first) as a 6th
slot whose description alone `probe_description` sets.
"""
from __future__ import annotations

import functools
from typing import Dict, Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from asct_jax.envs import _common as C
from asct_jax.envs.base import PAD_ID, SEP_ID, WorkflowTree
from asct_jax.infra.checks import check_range

MAX_HOPS = 4
MAX_ROUNDS = 3
STAGES = ("query", "retriever", "selection", "width", "control", "rerank", "context")
QUERY, RETRIEVER, SELECTION, WIDTH, CONTROL, RERANK, CONTEXT, DONE = range(8)
# Choice slots of RagSpaceState.choice and the stage each one is chosen at.
CHOICE_STAGES = (QUERY, RETRIEVER, SELECTION, WIDTH, RERANK, CONTEXT)
# (label, description) per stage, in slot order.
LABELS = (
    (("original", "question text"), ("query2doc", "expand with generated passages"),
     ("decompose", "split into subquestions")),
    (("bm25", "lexical match"), ("e5", "dense paraphrase match"),
     ("bge_m3", "hybrid dense lexical"), ("qwen3_embed", "large dense retriever"),
     ("rrf", "fuse 4 rankings")),
    (("relevance", "sort by score"), ("mmr", "diverse passages")),
    (("3", "passages per query"), ("6", "passages per query")),
    (("stop", "answer from evidence"), ("continue", "refine query search")),
    (("keep", "keep retrieved passages"), ("rerank", "reorder by relevance")),
    (("top2", "2 context passages"), ("top4", "4 context passages")),
)
PROBE_LABEL = "A"
PROBE_DESCRIPTIONS = {"relation": "prefers tagged answer evidence",
                      "type": "dense instruction metadata rule",
                      "name": "",
                      "opposite": "prefers untagged passages"}
DATASETS = ("hotpot", "twowiki", "musique")
SPLITS = ("train", "val", "test")
CUE_WORDS = (("lexical", "paraphrase"), ("rare", "common"))   # [cue][shown value]


class Q:
    """RagSpaceState.choice[0]: query formulation."""
    ORIGINAL, QUERY2DOC, DECOMPOSE = range(3)


class R:
    """RagSpaceState.choice[1]: retriever (PROBE only with params.probe)."""
    BM25, E5, BGE_M3, QWEN3, RRF, PROBE = range(6)


class Qtype:
    BRIDGE, COMPARISON = range(2)


# Per-dataset question mix: P(bridge), P(easy, medium, hard), P(2, 3, 4 hops), shift of the
# wording lexicality, P(rare entity), P(late bridge | bridge), threshold shift.
MIX = {
    "hotpot": dict(p_bridge=0.8, p_diff=(0.19, 0.64, 0.17), p_hops=(1.0, 0.0, 0.0),
                   lex_shift=0.0, p_rare=0.3, p_late=0.35, thr_shift=0.0),
    "twowiki": dict(p_bridge=0.45, p_diff=(0.10, 0.55, 0.35), p_hops=(1.0, 0.0, 0.0),
                    lex_shift=0.35, p_rare=0.5, p_late=0.5, thr_shift=0.25),
    "musique": dict(p_bridge=1.0, p_diff=(0.10, 0.50, 0.40), p_hops=(0.34, 0.33, 0.33),
                    lex_shift=-0.3, p_rare=0.3, p_late=0.6, thr_shift=0.2),
}

# Calibration constants of the evidence, F1, execution-word and auxiliary-token models.
CAL = dict(
    thr=(-0.8, 0.1, 1.4), thr_sigma=1.0,              # base_h = thr[diff] + sigma * N(0, 1)
    # retriever quality q = a + b lex + c rare + d lex rare (log-rank units), bm25 e5 bge qwen
    qual=((0.35, 0.92, 0.45, 0.08), (0.9, -0.67, -0.65, 0.25), (0.9, 0.33, -0.2, 0.0),
          (0.85, -0.25, 0.1, 0.0)),
    idio_ret=0.8, idio_query=0.6,                      # sigma of the idiosyncratic fits
    rrf_mix=(0.2, 0.6, 0.4),                           # rrf: a + b * max(q) + c * mean(q)
    probe_bonus=(0.5, 1.3),                            # A: bge_m3 + (other, answer hop)
    # query2doc: a relu(-lex) (sparse a, dense b) - c relu(lex) - d rare (+ chain hop)
    q2d=(1.2, 0.8, 0.3, 0.4), q2d_chain=0.2,
    dec=(0.2, 1.0, 0.8),                               # decompose: hop 1, chain hop, comparison
    dup_pen=(1.5, 0.2), mmr_pen=0.15,                  # relevance on comparison (w/o, w/ dec)
    chain_pen=(0.3, 2.5),                              # bridge entity unknown (not late, late)
    refine=(1.5, 0.2, 0.6, 3.0),                       # round >= 2: chain, generic, comparison,
                                                       #   found (its title is in the query)
    f_full=(0.88, 0.76, 0.58), g0=0.12, gamma=1.3, noise_pen=(0.005, 0.012, 0.025),
    PW=100, POOL=4, Q2D_WORDS=100, SUBQ_WORDS=12,      # execution words
    GEN_INSTR=30, Q2D_TOK=130, SUBQ_TOK=16, REFINE_TOK=6, RR_TOK=20, PASS_TOK=30,
    ANS_TOK=8, Q_WORDS_NOMINAL=21, Q_TOK_NOMINAL=27, WORD_SCALE=4096.0,
)


def vocabulary() -> set:
    words = C.words_of("stage chosen round evidence found missed hops h1 h2 h3 h4 done :",
                       "f1 ok bridge comparison", PROBE_LABEL, *PROBE_DESCRIPTIONS.values(),
                       *STAGES, *(w for c in CUE_WORDS for w in c))
    for stage in LABELS:
        for label, desc in stage:
            words |= C.words_of(label, desc)
    return words


@struct.dataclass
class RagSpaceParams:
    """Every setting of `ragspace` (presets: `small()` hotpot, `hard()` musique).

    Static: dataset (DATASETS), split (SPLITS: where `reset` samples its qid), describe
    (label descriptions in the observation), probe (retriever A, K = 6), probe_description
    (PROBE_DESCRIPTIONS), pool_seed, n_train / n_val / n_test (the pool: train ids first),
    max_turns, action_len / obs_len / feedback_len. Arrays: lam (utility weight per 4096
    execution words), cue_acc (probability that a cue word tells the truth).
    """

    dataset: str = C.static_field()
    split: str = C.static_field()
    describe: bool = C.static_field()
    probe: bool = C.static_field()
    probe_description: str = C.static_field()
    pool_seed: int = C.static_field()
    n_train: int = C.static_field()
    n_val: int = C.static_field()
    n_test: int = C.static_field()
    max_turns: int = C.static_field()
    action_len: int = C.static_field()
    obs_len: int = C.static_field()
    feedback_len: int = C.static_field()
    lam: chex.Array        # [] utility weight: U = F1 - lam * words / 4096
    cue_acc: chex.Array    # [] P(a cue word shows the true trait)

    @classmethod
    def _make(cls, dataset: str) -> "RagSpaceParams":
        return cls(dataset=dataset, split="train", describe=True, probe=False,
                   probe_description="relation", pool_seed=0, n_train=2000, n_val=400,
                   n_test=400, max_turns=9, action_len=3, obs_len=64, feedback_len=8,
                   lam=jnp.asarray(0.1, jnp.float32), cue_acc=jnp.asarray(0.8, jnp.float32))

    @classmethod
    def small(cls) -> "RagSpaceParams":
        return cls._make("hotpot")

    @classmethod
    def hard(cls) -> "RagSpaceParams":
        return cls._make("musique")

    def validate(self) -> None:
        C.check_choice("dataset", self.dataset, DATASETS)
        C.check_choice("split", self.split, SPLITS)
        C.check_choice("describe", self.describe, (True, False))
        C.check_choice("probe", self.probe, (True, False))
        C.check_choice("probe_description", self.probe_description, tuple(PROBE_DESCRIPTIONS))
        for f, lo in (("n_train", 1), ("n_val", 1), ("n_test", 1), ("max_turns", 1),
                      ("pool_seed", 0), ("action_len", 2), ("feedback_len", 7),
                      ("obs_len", 27 + 6 * self.num_retrievers)):   # the longest rendering
            check_range(f, getattr(self, f), lo=lo, integer=True)

    @property
    def num_retrievers(self) -> int:
        return 6 if self.probe else 5

    @property
    def num_questions(self) -> int:
        return self.n_train + self.n_val + self.n_test

    def split_range(self) -> Tuple[int, int]:
        """[lo, hi) qids of `split`: train, then val, then test."""
        lo = {"train": 0, "val": self.n_train, "test": self.n_train + self.n_val}[self.split]
        n = {"train": self.n_train, "val": self.n_val, "test": self.n_test}[self.split]
        return lo, lo + n


@chex.dataclass(frozen=True)
class RagSpaceState:
    key: chex.PRNGKey
    turn: chex.Array       # [] int32
    done: chex.Array       # [] bool
    qid: chex.Array        # [] int32 question id in [0, num_questions)
    node: chex.Array       # [] int32 WorkflowTree node of the executed prefix (root 0)
    stage: chex.Array      # [] int32 QUERY .. CONTEXT, DONE
    choice: chex.Array     # [6] int32 slot chosen at CHOICE_STAGES (-1 not yet)
    rounds: chex.Array     # [] int32 retrieval rounds executed (0..3)
    found: chex.Array      # [H] bool hop's supporting passage retrieved (any round)
    rank: chex.Array       # [H] int32 its best rank in a list (lexicographic (rank, list))
    lst: chex.Array        # [H] int32 the list it has that rank in (round-major)
    in_ctx: chex.Array     # [H] bool in the answer context (set at the terminal step)
    f1: chex.Array         # [] float32 (terminal)
    words: chex.Array      # [] float32 execution words C_exec so far
    aux: chex.Array        # [] float32 auxiliary tokens T_env so far
    # the hidden question (question_features), fixed by qid
    qtype: chex.Array      # [] int32 Qtype
    diff: chex.Array       # [] int32 0 easy, 1 medium, 2 hard
    hops: chex.Array       # [] int32 2..4
    lex: chex.Array        # [] float32 wording lexicality in [-1, 1]
    rare: chex.Array       # [] bool rare entities
    late: chex.Array       # [] bool chain hops only findable after their predecessor
    base: chex.Array       # [H] float32 per-hop thresholds (log-rank before retrieval)
    cues: chex.Array       # [2] int32 shown cue values (CUE_WORDS[i][cues[i]])
    q_words: chex.Array    # [] float32 question words
    q_tok: chex.Array      # [] float32 question tokens
    idio: chex.Array       # [9] float32 N(0, 1) idiosyncratic fit of retrievers 0..5, queries


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
                          + jnp.uint32(params.pool_seed * 7919)) & jnp.uint32(0xFFFF)
                         ).astype(jnp.float32) / 65536.0   # u = frac(qid * mult / 2^16)
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


def edge_cost(stage, k, qry, ret, sel, wid, rounds, n_found, q_words, q_tok):
    """(execution words, auxiliary tokens) of taking slot k at a prefix; elementwise.

    stage, k, qry, ret, sel, wid (the prefix's choices, any value where unset), rounds,
    n_found (hops found so far), q_words, q_tok: broadcastable arrays.
    """
    q2d, dec = k == Q.QUERY2DOC, k == Q.DECOMPOSE
    w_query = jnp.where(q2d, q_words + CAL["Q2D_WORDS"],
                        jnp.where(dec, q_words + 2 * CAL["SUBQ_WORDS"], 0.0))
    t_query = jnp.where(q2d, q_tok + CAL["GEN_INSTR"] + CAL["Q2D_TOK"],
                        jnp.where(dec, q_tok + CAL["GEN_INSTR"] + 2 * CAL["SUBQ_TOK"], 0.0))
    wid_now = jnp.where(stage == WIDTH, k, wid)
    n_ret = (stage == WIDTH) | ((stage == CONTROL) & (k == 1))   # a retrieval round runs
    w_ret = _round_words(qry, ret, sel, wid_now)
    t_ret = _round_aux(qry, ret, q_tok, jnp.where(stage == WIDTH, 0, n_found))
    n_pass = _n_pass(rounds, qry, wid)
    w_rr = n_pass * CAL["PW"]                                     # reranker reads the set
    t_rr = n_pass * CAL["RR_TOK"]
    c = jnp.minimum(_ctx(k), n_pass)
    w_gen = c * CAL["PW"] + q_words                               # context + question
    t_gen = q_tok + CAL["GEN_INSTR"] + c * CAL["PASS_TOK"] + CAL["ANS_TOK"]
    words = jnp.select([stage == QUERY, n_ret, (stage == RERANK) & (k == 1), stage == CONTEXT],
                       [w_query, w_ret, w_rr, w_gen], 0.0)
    aux = jnp.select([stage == QUERY, n_ret, (stage == RERANK) & (k == 1), stage == CONTEXT],
                     [t_query, t_ret, t_rr, t_gen], 0.0)
    return words.astype(jnp.float32), aux.astype(jnp.float32)


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


def _retrieve(s: RagSpaceState, rnd) -> RagSpaceState:
    """`s` after retrieval round `rnd`: finds merged, best (rank, list) kept per hop."""
    found, rank, lst = _round(s, rnd)
    better = found & (~s.found | (rank < s.rank))
    return s.replace(found=s.found | found, rank=jnp.where(better, rank, s.rank),
                     lst=jnp.where(better, lst, s.lst), rounds=jnp.asarray(rnd, jnp.int32))


def _answer(s: RagSpaceState, cx) -> Tuple[chex.Array, chex.Array]:
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


# ---------------------------------------------------------------------------- workflow tree
@functools.lru_cache(maxsize=4)
def workflow_tree(num_retrievers: int = 5) -> Tuple[WorkflowTree, Dict[str, np.ndarray]]:
    """(WorkflowTree, node attributes) of the staged workflow, in NumPy (cached).

    Nodes in breadth-first order (root 0). Node attributes: stage [P], choice [P, 6],
    rounds [P]. edge_tokens are the auxiliary tokens at the nominal question length with
    no evidence found (the realized ones are `action_costs`).
    """
    K = max(num_retrievers, 3)
    nodes = [(QUERY, 0, (-1,) * 6)]
    children = []
    i = 0
    while i < len(nodes):
        stage, rounds, ch = nodes[i]
        row = [-1] * K
        for k in range(K):
            if stage == DONE or k >= _n_legal(stage, rounds, num_retrievers):
                continue
            if stage == CONTROL:
                nxt = (RERANK, rounds, ch) if k == 0 else (CONTROL, rounds + 1, ch)
            else:
                c = list(ch)
                c[CHOICE_STAGES.index(stage)] = k
                nxt = (CONTROL if stage == WIDTH else stage + 1 if stage < CONTEXT else DONE,
                       1 if stage == WIDTH else rounds, tuple(c))
            row[k] = len(nodes)
            nodes.append(nxt)
        children.append(row)
        i += 1
    children = np.asarray(children, np.int32)
    stage = np.asarray([n[0] for n in nodes], np.int32)
    rounds = np.asarray([n[1] for n in nodes], np.int32)
    choice = np.asarray([n[2] for n in nodes], np.int32)
    depth = np.zeros(len(nodes), np.int32)
    for p in range(len(nodes)):
        for c in children[p]:
            if c >= 0:
                depth[c] = depth[p] + 1
    kk = np.arange(K)[None, :]
    _, tok = edge_cost(stage[:, None], kk, *(choice[:, j, None] for j in range(4)),
                       rounds[:, None], 0, float(CAL["Q_WORDS_NOMINAL"]),
                       float(CAL["Q_TOK_NOMINAL"]))
    tok = np.where(children >= 0, np.asarray(tok), 0.0).astype(np.float32)
    tree = WorkflowTree(children=children, terminal=stage == DONE, edge_tokens=tok,
                        depth=depth)
    return tree, dict(stage=stage, choice=choice, rounds=rounds)


def _n_legal(stage: int, rounds: int, num_retrievers: int) -> int:
    """Legal slots 0 .. n - 1 of a stage (control at round 3: stop only)."""
    if stage == CONTROL:
        return 1 if rounds >= MAX_ROUNDS else 2
    return num_retrievers if stage == RETRIEVER else len(LABELS[stage]) if stage < DONE else 0


def workflow_actions(num_retrievers: int = 5) -> np.ndarray:
    """[W, 9] int32 slot sequences of every complete workflow (-1 after its end)."""
    tree, _ = workflow_tree(num_retrievers)
    paths = {0: []}
    for p in range(tree.children.shape[0]):          # BFS order: parents before children
        for k, c in enumerate(tree.children[p]):
            if c >= 0:
                paths[int(c)] = paths[p] + [k]
    out = [paths[n] + [-1] * (9 - len(paths[n])) for n in np.flatnonzero(tree.terminal)]
    return np.asarray(out, np.int32)


# ---------------------------------------------------------------------------- environment
class RagSpace(C.TextEnvironment):
    """The RAGSpace-workflow analogue (see the module docstring)."""

    name = "ragspace"
    params_cls = RagSpaceParams

    def __init__(self, params: RagSpaceParams | None = None):
        params = RagSpaceParams.small() if params is None else params
        params.validate()
        self.params = params
        self.H = MAX_HOPS
        self.num_actions = K = params.num_retrievers
        self.action_len = params.action_len
        self.obs_len = params.obs_len
        self.feedback_len = params.feedback_len
        self.max_turns = params.max_turns
        self._init_text()
        labels = [list(st) for st in LABELS]
        if params.probe:
            labels[RETRIEVER].append((PROBE_LABEL, PROBE_DESCRIPTIONS[params.probe_description]))
        A = self.action_len
        wid = lambda w: int(C.encode(w, 1)[0])
        pad = lambda rows, n: rows + [""] * (n - len(rows))
        # [7, K, A] candidate tokens, [8, K] label id, [8, K, 6] "label description"
        self.t_cand = np.stack([C.encode_table(pad([l for l, _ in st], K), A, eos=True)
                                for st in labels])
        self.t_cand[np.asarray([[k >= len(st) for k in range(K)] for st in labels])] = PAD_ID
        self.w_label = np.zeros((8, K), np.int32)
        self.t_desc = np.zeros((8, K, 6), np.int32)
        for i, st in enumerate(labels):
            self.w_label[i, :len(st)] = [wid(l) for l, _ in st]
            self.t_desc[i, :len(st)] = C.encode_table([f"{l} {d}" for l, d in st], 6)
        self.n_legal = np.asarray([_n_legal(s, 0, K) for s in range(8)], np.int32)
        self.w_stage = np.asarray([wid(s) for s in STAGES + ("done",)], np.int32)
        self.w_cue = np.asarray([[wid(w) for w in c] for c in CUE_WORDS], np.int32)
        self.w_hop = np.asarray([wid(f"h{i + 1}") for i in range(MAX_HOPS)], np.int32)
        self.w_num = np.asarray([wid(w) for w in C.NUMBER_WORDS], np.int32)
        self.w = {w: wid(w) for w in ("bridge", "comparison", "hops", "stage", "chosen",
                                      "round", "evidence", "found", "missed", ":", "ok", "f1")}
        tree, _ = workflow_tree(K)
        self.children = tree.children
        self._freeze_tables()
        self._tree = WorkflowTree(*(jnp.asarray(x) for x in tree))   # built in NumPy, cached

    # ------------------------------------------------------------------ workflow hooks
    def workflow(self, params) -> WorkflowTree:
        """The enumerated prefix tree (jnp arrays; `workflow_tree` has the NumPy one)."""
        return self._tree

    def workflow_node(self, state, params) -> chex.Array:
        return state.node

    def question_id(self, state, params) -> chex.Array:
        return state.qid

    def num_questions(self, params) -> int:
        return params.num_questions

    # ------------------------------------------------------------------ protocol
    def reset_question(self, key, qid, params) -> RagSpaceState:
        """The initial state of question `qid` ([] int32), carrying `key`."""
        H = self.H
        z = lambda dt: jnp.zeros((), dt)
        return RagSpaceState(
            key=key, turn=z(jnp.int32), done=z(bool), qid=jnp.asarray(qid, jnp.int32),
            node=z(jnp.int32), stage=z(jnp.int32), choice=jnp.full((6,), -1, jnp.int32),
            rounds=z(jnp.int32), found=jnp.zeros((H,), bool),
            rank=jnp.full((H,), 99, jnp.int32), lst=jnp.zeros((H,), jnp.int32),
            in_ctx=jnp.zeros((H,), bool), f1=z(jnp.float32), words=z(jnp.float32),
            aux=z(jnp.float32), **question_features(qid, params))

    def reset_env(self, key, params) -> RagSpaceState:
        """A qid uniform over `params.split`; the rest is a function of the qid."""
        key, kq = jax.random.split(key)
        lo, hi = params.split_range()
        return self.reset_question(key, jax.random.randint(kq, (), lo, hi), params)

    def _legal(self, s: RagSpaceState) -> chex.Array:
        k = jnp.arange(self.num_actions)
        n = jnp.asarray(self.n_legal)[s.stage]
        n = jnp.where((s.stage == CONTROL) & (s.rounds >= MAX_ROUNDS), 1, n)
        return (k < n) & ~s.done

    def legal_actions(self, state, params):
        """[K, A] the stage's label tokens, [K] legal (PAD rows past the stage's labels)."""
        cands = jnp.asarray(self.t_cand)[jnp.minimum(state.stage, CONTEXT)]
        return cands, self._legal(state)

    def _costs(self, s: RagSpaceState, k):
        return edge_cost(s.stage, k, s.choice[0], s.choice[1], s.choice[2], s.choice[3],
                         s.rounds, jnp.sum(s.found), s.q_words, s.q_tok)

    def action_costs(self, state, params):
        """[K] float32 realized auxiliary tokens of executing each candidate (0 illegal)."""
        _, aux = self._costs(state, jnp.arange(self.num_actions))
        return jnp.where(self._legal(state), aux, 0.0)

    def transition(self, s: RagSpaceState, idx, key, params):
        """Slot `idx` (legal) at the stage of `s`: (state, feedback [F], reward [])."""
        idx = jnp.asarray(idx, jnp.int32)
        words, aux = self._costs(s, idx)
        slot = jnp.asarray([CHOICE_STAGES.index(x) if x in CHOICE_STAGES else 0
                            for x in range(8)], jnp.int32)[s.stage]
        sets = jnp.asarray([x in CHOICE_STAGES for x in range(8)])[s.stage]
        choice = jnp.where(sets & (jnp.arange(6) == slot), idx, s.choice)
        s1 = s.replace(choice=choice, words=s.words + words, aux=s.aux + aux,
                       node=jnp.asarray(self.children)[s.node, idx])
        retrieve = (s.stage == WIDTH) | ((s.stage == CONTROL) & (idx == 1))
        s_ret = _retrieve(s1, s.rounds + 1)
        in_ctx, f1 = _answer(s1, idx)
        answered = s.stage == CONTEXT
        nxt = jnp.select([s.stage == WIDTH, (s.stage == CONTROL) & (idx == 1),
                          s.stage == CONTROL], [CONTROL, CONTROL, RERANK], s.stage + 1)
        s2 = C.tree_select(retrieve, s_ret, s1)
        s2 = s2.replace(stage=nxt.astype(jnp.int32), done=answered,
                        in_ctx=jnp.where(answered, in_ctx, s2.in_ctx),
                        f1=jnp.where(answered, f1, s2.f1))
        utility = s2.f1 - params.lam * s2.words / CAL["WORD_SCALE"]   # U = F1 - lam w / 4096
        reward = jnp.where(answered, utility, 0.0).astype(jnp.float32)
        # feedback: "{label} : found h1 h2" after retrieval, "{label} : f1 {F1 x 100}" at the
        # end, "{label} : ok" otherwise.
        label = jnp.asarray(self.w_label)[s.stage, idx]
        hops = jnp.where(s2.found, jnp.asarray(self.w_hop), PAD_ID)
        ev = jnp.concatenate([jnp.where(jnp.any(s2.found), self.w["found"], self.w["missed"])[None],
                              hops])
        f1_word = jnp.asarray(self.w_num)[jnp.clip(jnp.round(f1 * 100).astype(jnp.int32), 0, 100)]
        tail = jnp.select([retrieve, answered],
                          [ev, jnp.asarray([self.w["f1"], 0, 0, 0, 0]).at[1].set(f1_word)],
                          jnp.asarray([self.w["ok"], 0, 0, 0, 0]))
        fb = C.render([jnp.stack([label, jnp.int32(self.w[":"])]), tail], self.feedback_len)
        return s2, fb, reward

    def on_timeout(self, s: RagSpaceState, feedback, params):
        """Turn limit without an answer: F1 = 0, the last reward is -lam * words / 4096."""
        return s, feedback, -params.lam * s.words / CAL["WORD_SCALE"]

    def observe(self, s: RagSpaceState, params) -> chex.Array:
        """[O] int32: the observation tokens of state `s`."""
        w, h = self.w, jnp.arange(self.H)
        q = [jnp.where(s.qtype == Qtype.BRIDGE, w["bridge"], w["comparison"]),
             jnp.asarray(self.w_num)[s.hops], w["hops"],
             jnp.asarray(self.w_cue)[jnp.arange(2), s.cues]]
        st = [SEP_ID, w["stage"], jnp.asarray(self.w_stage)[s.stage]]
        stage_of = jnp.asarray(CHOICE_STAGES)
        chosen = jnp.where(s.choice >= 0,
                           jnp.asarray(self.w_label)[stage_of, jnp.maximum(s.choice, 0)], PAD_ID)
        shown = s.rounds >= 1
        rnd = jnp.where(shown, jnp.stack([jnp.int32(w["round"]),
                                          jnp.asarray(self.w_num)[s.rounds]]), PAD_ID)
        ev = jnp.stack([jnp.asarray(self.w_hop),
                        jnp.where(s.found, w["found"], w["missed"])], 1)
        ev = jnp.where((h < s.hops)[:, None] & shown, ev, PAD_ID).reshape(-1)
        segs = [*q, st, [w["chosen"]], chosen, rnd,
                jnp.where(shown, w["evidence"], PAD_ID)[None], ev, [SEP_ID]]
        legal = self._legal(s)
        if self.params.describe:
            desc = jnp.asarray(self.t_desc)[s.stage]
        else:
            desc = jnp.zeros((self.num_actions, 6), jnp.int32).at[:, 0].set(
                jnp.asarray(self.w_label)[s.stage])
        segs.append(jnp.where(legal[:, None], desc, PAD_ID).reshape(-1))
        return C.render(segs, self.obs_len)

    def info(self, s: RagSpaceState, params):
        utility = s.f1 - params.lam * s.words / CAL["WORD_SCALE"]
        n_in = jnp.sum(s.in_ctx)
        return C.info_dict(utility=utility, f1=s.f1, exec_words=s.words, score=utility,
                           success=s.done & (n_in == s.hops), recall=n_in / s.hops,
                           rounds=s.rounds, difficulty=s.diff, qtype=s.qtype, aux_tokens=s.aux,
                           # the description probe's selection rate (Table 6): retriever A
                           probe_chosen=s.choice[1] == R.PROBE)


# ---------------------------------------------------------------------------- policies
# Base: original / bge_m3 / relevance / 6 / continue / stop / keep / top4 (slot indices).
BASE_WORKFLOW = (Q.ORIGINAL, R.BGE_M3, 0, 1, 1, 0, 0, 1)


def base_policy(s: RagSpaceState, params, key=None) -> jax.Array:
    """The default workflow "Base": original / bge_m3 / relevance / 6 / continue once /
    keep / top4. [] int32 slot index."""
    a = jnp.select([s.stage == QUERY, s.stage == RETRIEVER, s.stage == SELECTION,
                    s.stage == WIDTH, s.stage == CONTROL, s.stage == RERANK],
                   [Q.ORIGINAL, R.BGE_M3, 0, 1, jnp.where(s.rounds < 2, 1, 0), 0], 1)
    return a.astype(jnp.int32)


def expert_policy(s: RagSpaceState, params, key=None) -> jax.Array:
    """Observation-only adaptive rule (warm starts): [] int32 slot index.

    Reads only what the observation shows (type, hops, cue words, stage, choices, round,
    evidence). Query: query2doc for paraphrase with common entities, else original.
    Retriever: bm25 for lexical wording with rare entities, bge_m3 for lexical with common
    ones, qwen3_embed for paraphrase (A when probing with its "relation" description).
    Selection: mmr for comparisons. Width 6 for 4 hops, else 3. Control: stop once every
    hop has evidence or at round 3, a 2-hop question with some evidence at round 2; else
    continue. Rerank. Context: top2 for 2 hops, else top4.
    """
    comp = s.qtype == Qtype.COMPARISON
    lexical, rare = s.cues[0] == 0, s.cues[1] == 0
    h = jnp.arange(MAX_HOPS)
    all_found = jnp.all(s.found | (h >= s.hops))
    a_query = jnp.where(~lexical & ~rare, Q.QUERY2DOC, Q.ORIGINAL)
    a_ret = jnp.where(lexical, jnp.where(rare, R.BM25, R.BGE_M3), R.QWEN3)
    if params.probe and params.probe_description == "relation":
        a_ret = jnp.int32(R.PROBE)
    stop = (all_found | (s.rounds >= MAX_ROUNDS)
            | ((s.hops <= 2) & (s.rounds >= 2) & jnp.any(s.found)))
    a = jnp.select([s.stage == QUERY, s.stage == RETRIEVER, s.stage == SELECTION,
                    s.stage == WIDTH, s.stage == CONTROL, s.stage == RERANK],
                   [a_query, a_ret, jnp.where(comp, 1, 0), jnp.where(s.hops >= 4, 1, 0),
                    jnp.where(stop, 0, 1), 1], jnp.where(s.hops <= 2, 0, 1))
    return a.astype(jnp.int32)


def random_policy(s: RagSpaceState, params, key) -> jax.Array:
    """Uniform random index among the legal candidates: [] int32."""
    k = jnp.arange(params.num_retrievers)
    n = jnp.asarray([_n_legal(x, 0, params.num_retrievers) for x in range(8)])[s.stage]
    n = jnp.where((s.stage == CONTROL) & (s.rounds >= MAX_ROUNDS), 1, n)
    return C.uniform_policy((k < n) | ((n == 0) & (k == 0)), key)


# ---------------------------------------------------------------------------- evaluation
def run_workflow(env: RagSpace, params, qid, actions) -> Dict[str, chex.Array]:
    """Final info of question `qid` ([] int32) under slot sequence `actions` ([9] int32,
    -1 = no step): index-level transitions (no parsing, rendering or turn limit). vmap it
    over qids and workflows."""
    chex.assert_shape(actions, (9,))
    chex.assert_rank(qid, 0)
    s0 = env.reset_question(jax.random.PRNGKey(0), qid, params)

    def body(s, a):
        s2, _, _ = env.transition(s, jnp.maximum(a, 0), s.key, params)
        return C.tree_select((a >= 0) & ~s.done, s2, s), None

    s, _ = jax.lax.scan(body, s0, actions)
    return env.info(s, params)


def run_policy(env: RagSpace, params, qid, policy) -> Dict[str, chex.Array]:
    """Final info of question `qid` ([] int32) under `policy(state, params, key) -> []
    int32 slot` (index level, as run_workflow; step t's key is fold_in(state key, t))."""
    chex.assert_rank(qid, 0)
    s0 = env.reset_question(jax.random.PRNGKey(0), qid, params)

    def body(s, t):
        a = policy(s, params, jax.random.fold_in(s.key, t))
        s2, _, _ = env.transition(s, a, s.key, params)
        return C.tree_select(~s.done, s2, s), None

    s, _ = jax.lax.scan(body, s0, jnp.arange(9))
    return env.info(s, params)
