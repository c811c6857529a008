"""Scripted policies of `ragspace` (Base, the expert, random) and the index-level runners
that evaluate a fixed workflow or a policy on one question."""
from __future__ import annotations

from typing import Dict

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs import _common as C
from asct_jax.envs.ragspace.spec import (CONTROL, MAX_HOPS, MAX_ROUNDS, QUERY, RERANK,
                                         RETRIEVER, SELECTION, WIDTH, Q, Qtype, R,
                                         RagSpaceState, num_legal)

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
    n = jnp.asarray([num_legal(x, 0, params.num_retrievers) for x in range(8)])[s.stage]
    n = jnp.where((s.stage == CONTROL) & (s.rounds >= MAX_ROUNDS), 1, n)
    return C.uniform_policy((k < n) | ((n == 0) & (k == 0)), key)


# ---------------------------------------------------------------------------- evaluation
def run_workflow(env, params, qid, actions) -> Dict[str, chex.Array]:
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


def run_policy(env, params, qid, policy) -> Dict[str, chex.Array]:
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
