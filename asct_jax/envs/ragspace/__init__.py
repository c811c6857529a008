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
rankings (per query), reranker input; by category in `action_cost_parts` (COST_PARTS,
the ASCT paper's Table 3 rows).

Calibration (test split, `python -m experiments.studies.ragspace_landscape --config.all`; U / F1 /
words): hotpot Base 0.563 / 0.690 / 5221, best fixed 0.607, expert 0.648 / 0.706 / 2351,
oracle 0.709; the expert (observation only) beats all 720 fixed workflows on every
dataset. Base = original / bge_m3 / relevance / 6 / continue once / keep / top4.

Observation: question type, hops, two noisy cue words (wording lexical / paraphrase,
entities rare / common), the stage, the labels chosen so far, the round, the evidence per
hop (found / missed), each legal label with its description (`describe`). Datasets:
"hotpot" (2 hops), "twowiki" (more comparisons, lexical, harder), "musique" (2/3/4 hops,
all chains, harder). `probe` adds retriever A (answer-bearing passages first) as a 6th
slot whose description alone `probe_description` sets.

Modules: spec (stages, labels, datasets, calibration, settings, state), simulator (the
hidden question, the execution-cost model, the evidence and the answer), workflows (the
enumerated prefix tree), env (the `RagSpace` text environment), scripted (Base, the
expert, random, and the index-level runners).
"""
from __future__ import annotations

from asct_jax.envs.ragspace.env import RagSpace, vocabulary  # noqa: F401
from asct_jax.envs.ragspace.scripted import (  # noqa: F401
    BASE_WORKFLOW, base_policy, expert_policy, random_policy, run_policy, run_workflow)
from asct_jax.envs.ragspace.simulator import (  # noqa: F401
    COST_PARTS, edge_cost, edge_cost_parts, question_features)
from asct_jax.envs.ragspace.spec import (  # noqa: F401
    CAL, CHOICE_STAGES, CONTEXT, CONTROL, CUE_WORDS, DATASETS, DONE, LABELS, MAX_HOPS,
    MAX_ROUNDS, MIX, PROBE_DESCRIPTIONS, PROBE_LABEL, QUERY, RERANK, RETRIEVER, SELECTION,
    SPLITS, STAGES, WIDTH, Q, Qtype, R, RagSpaceParams, RagSpaceState)
from asct_jax.envs.ragspace.workflows import workflow_actions, workflow_tree  # noqa: F401
