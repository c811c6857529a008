"""The stages, labels, datasets, calibration constants, settings and state of `ragspace`
(the model they parametrise: the package docstring)."""
from __future__ import annotations

from typing import Tuple

import chex
import jax.numpy as jnp
from flax import struct

from asct_jax.envs import _common as C
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


def num_legal(stage: int, rounds: int, num_retrievers: int) -> int:
    """Legal slots 0 .. n - 1 of a stage (control at round 3: stop only)."""
    if stage == CONTROL:
        return 1 if rounds >= MAX_ROUNDS else 2
    return num_retrievers if stage == RETRIEVER else len(LABELS[stage]) if stage < DONE else 0
