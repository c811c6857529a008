"""Scripted policies of `ragspace` (Base, the expert, random) and the runners that
evaluate a fixed workflow or a policy on one question (the one loop, play_from, with a
scripted actor)."""
from __future__ import annotations

from typing import Dict

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs import _common as C
from asct_jax.envs.base import PAD_ID
from asct_jax.envs.play import Choice, StateActor, play_from
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
# One question played by the one loop (asct_jax.envs.play.play_from) from its initial
# state (key PRNGKey(0)), at most RUN_TURNS turns: a scripted actor sends the candidate
# tokens of a slot index, the environment parses them back (the same slot: every stage's
# labels are distinct) and steps. A turn's key is the actor's own, fold_in(initial key,
# t); the transition reads no key and no turn counter, so the final state's info is the
# index-level one (what the stored landscapes were computed with).
RUN_TURNS = 9   # the longest workflow: query, retriever, selection, width, 3 rounds, rerank, context


def _slot_actor(env, params, slot) -> StateActor:
    """A scripted StateActor: slot(state, t, key) -> [] int32 slot index at turn t (-1: no
    step, sent as an all-PAD action: "nothing happens"); key = fold_in(initial key, t);
    its carry (t, initial key)."""

    def act(state, key, carry):
        t, key0 = carry
        a = slot(state, t, jax.random.fold_in(key0, t))
        cands, _ = env.legal_actions(state, params)
        response = jnp.where(a >= 0, cands[jnp.maximum(a, 0)], PAD_ID)
        return (Choice(response=response, index=a, penalty=jnp.float32(0.0),
                       tokens=jnp.float32(0.0)), (t + 1, key0))

    return StateActor(init=lambda state: (jnp.int32(0), state.key), act=act)


def _run(env, params, qid, actor) -> Dict[str, chex.Array]:
    chex.assert_rank(qid, 0)
    if env.max_turns < RUN_TURNS:
        raise ValueError(f"ragspace's scripted runs play up to {RUN_TURNS} turns (a whole "
                         f"workflow) but max_turns is {env.max_turns}")
    s0 = env.reset_question(jax.random.PRNGKey(0), qid, params)
    out = play_from(env, params, actor, s0, jax.random.PRNGKey(0), RUN_TURNS)
    return env.info(out.state, params)


def run_workflow(env, params, qid, actions) -> Dict[str, chex.Array]:
    """Final info of question `qid` ([] int32) under slot sequence `actions` ([9] int32,
    -1 = no step), played by play_from (see above). vmap it over qids and workflows."""
    chex.assert_shape(actions, (RUN_TURNS,))
    return _run(env, params, qid,
                _slot_actor(env, params, lambda s, t, key: actions[t]))


def run_policy(env, params, qid, policy) -> Dict[str, chex.Array]:
    """Final info of question `qid` ([] int32) under `policy(state, params, key) -> []
    int32 slot`, played by play_from (see above; step t's key is fold_in(initial key, t))."""
    return _run(env, params, qid,
                _slot_actor(env, params, lambda s, t, key: policy(s, params, key)))
