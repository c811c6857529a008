"""`rag_workflow`: an agentic-RAG workflow analogue of HotpotQA (not HotpotQA).

A hidden multi-hop question (bridge or comparison, 1..H hops, each hop easy or hard) is
answered by composing workflow components; each action calls one component:

  type  default name      transfer name    effect
  0     retrieve          search           docs for the next hop, p = p_ret[difficulty]
  1     deep_retrieve     dense_search     docs for the next hop, p = p_deep[difficulty]
  2     decompose         split_question   + boost_decomp to all later retrievals, halves
                                           the wrong-fact rate of later reads
  3     rewrite           reformulate      + boost_rewrite to the next retrieval
  4     read              skim             docs -> fact (p_read); the fact is wrong with
                                           p_wrong[difficulty] (hidden); in a bridge
                                           question a wrong fact makes the next hop wrong
  5     extract_bridge    link_entity      bridge entity of the last read hop; without it
                                           the next hop's retrieval is gated by bridge_gate
  6     verify            check            finds the first wrong fact (back to docs, later
                                           bridge hops reset) or, all facts right, marks
                                           the evidence verified (F1 bonus)
  7     answer            respond          ends the episode
  8     rerank  (hard)    reorder          next read always succeeds, fewer wrong facts
  9     summarize (hard)  condense         does nothing useful (a costly distractor)

Answer F1 = 0.8 + 0.2 * verified if every hop's fact is right, else 0.4 * (fraction of
right facts). Execution tokens = sum of the called components' costs (`action_costs`).
utility = F1 - lam * tokens / 1000.

Reward: 0 at every step except the last one, which gets the utility (on "answer" or on
the turn limit, where F1 = 0). info: success (answered with every fact right), score
(= utility so far), f1, exec_cost (tokens), utility.

Observation x_t: question type and hop count, the evidence status per hop (none / docs /
fact, "verified"), the last three components with their outcomes, pending flags, the
turn, and (describe_components=True) each candidate component's name with a three-word
description. Difficulty and wrong facts are hidden. Early choices pay off late
(decompose, rewrite, extract_bridge, verify); the cheap greedy retrieve-read-answer loses.
"""
from __future__ import annotations


import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from asct_jax.envs import _common as C
from asct_jax.envs.base import PAD_ID, SEP_ID

# (name, three-word description, cost in tokens), by component type.
COMPONENTS = {
    "default": [
        ("retrieve", "cheap quick search", 50.0),
        ("deep_retrieve", "costly thorough search", 400.0),
        ("decompose", "plan subquestions upfront", 150.0),
        ("rewrite", "sharpen next query", 60.0),
        ("read", "read retrieved passages", 200.0),
        ("extract_bridge", "get linking entity", 40.0),
        ("verify", "check facts errors", 250.0),
        ("answer", "give final answer", 100.0),
        ("rerank", "sort passages relevance", 120.0),
        ("summarize", "compress context text", 300.0),
    ],
    "transfer": [
        ("search", "fast cheap lookup", 80.0),
        ("dense_search", "slow exhaustive lookup", 300.0),
        ("split_question", "break into subquestions", 200.0),
        ("reformulate", "improve next query", 40.0),
        ("skim", "extract fact passages", 150.0),
        ("link_entity", "find bridging entity", 60.0),
        ("check", "detect wrong facts", 200.0),
        ("respond", "output final answer", 120.0),
        ("reorder", "rank passages relevance", 100.0),
        ("condense", "shorten context text", 250.0),
    ],
}
# Candidate slot -> component type. The transfer set also reorders the candidates.
ORDER = {("default", 8): list(range(8)), ("default", 10): list(range(10)),
         ("transfer", 8): [3, 0, 6, 1, 4, 7, 2, 5], ("transfer", 10): [3, 0, 6, 1, 9, 4, 7, 2, 8, 5]}
OUTCOMES = ("found", "missed", "ok", "failed", "useless", "flagged", "passed", "answered")
FOUND, MISSED, OK, FAILED, USELESS, FLAGGED, PASSED, ANSWERED = range(8)
STATUS_WORDS = ("none", "docs", "fact")
RETRIEVE, DEEP, DECOMPOSE, REWRITE, READ, EXTRACT, VERIFY, ANSWER, RERANK, SUMMARIZE = range(10)


class Question:
    """RagWorkflowState.qtype."""
    BRIDGE, COMPARISON = range(2)


class Hop:
    """RagWorkflowState.status[h] (and STATUS_WORDS)."""
    NONE, DOCS, FACT = range(3)


class Flag:
    """Index into RagWorkflowState.flags."""
    DECOMPOSED, REWRITTEN, RERANKED, VERIFIED = range(4)


def vocabulary():
    words = set()
    for comps in COMPONENTS.values():
        for name, desc, _ in comps:
            words |= C.words_of(name, desc)
    return words | C.words_of(
        "now call the tool", "bridge comparison question hops evidence verified history",
        "decomposed rewritten reranked turn :", "h1 h2 h3", *OUTCOMES, *STATUS_WORDS, "f1")


@struct.dataclass
class RagWorkflowParams:
    """Every setting of `rag_workflow` (presets: `small()`, `hard()`).

    Static (shapes and tables): component_set ("default" | "transfer"), describe_components
    (component descriptions in the observation), num_hops H, num_actions K (8 or 10
    components), max_turns T, action_len / obs_len / feedback_len. Arrays: the rest.
    `costs` and `ctype` are derived from component_set and num_actions.
    """

    component_set: str = C.static_field()
    describe_components: bool = C.static_field()
    num_hops: int = C.static_field()
    num_actions: int = C.static_field()
    max_turns: int = C.static_field()
    action_len: int = C.static_field()
    obs_len: int = C.static_field()
    feedback_len: int = C.static_field()
    lam: chex.Array            # [] utility weight per 1000 execution tokens
    hop_probs: chex.Array      # [H] probability of 1..H hops
    p_bridge: chex.Array       # [] probability of a bridge (vs comparison) question
    p_hard: chex.Array         # [] probability that a hop is hard
    p_ret: chex.Array          # [2] retrieve success, easy / hard hop
    p_deep: chex.Array         # [2] deep retrieve success
    boost_decomp: chex.Array   # []
    boost_rewrite: chex.Array  # []
    bridge_gate: chex.Array    # [] retrieval factor without the previous bridge entity
    p_read: chex.Array         # []
    p_wrong: chex.Array        # [2] wrong-fact probability of a read, easy / hard hop

    @classmethod
    def _make(cls, **kw) -> "RagWorkflowParams":
        f = lambda x: jnp.asarray(x, jnp.float32)
        dyn = dict(p_bridge=0.6, p_ret=[0.85, 0.3], p_deep=[0.97, 0.8], boost_decomp=0.15,
                   boost_rewrite=0.35, bridge_gate=0.2, p_read=0.9, p_wrong=[0.1, 0.35])
        dyn.update({k: kw.pop(k) for k in ("lam", "hop_probs", "p_hard")})
        return cls(component_set="default", describe_components=True, action_len=8,
                   feedback_len=8, **kw, **{k: f(v) for k, v in dyn.items()})

    @classmethod
    def small(cls) -> "RagWorkflowParams":
        return cls._make(num_hops=2, num_actions=8, max_turns=10, obs_len=64, lam=0.1,
                         hop_probs=[0.6, 0.4], p_hard=0.2)

    @classmethod
    def hard(cls) -> "RagWorkflowParams":
        return cls._make(num_hops=3, num_actions=10, max_turns=14, obs_len=80, lam=0.3,
                         hop_probs=[0.2, 0.4, 0.4], p_hard=0.5)

    def validate(self) -> None:
        C.check_choice("component_set", self.component_set, tuple(COMPONENTS))
        C.check_choice("describe_components", self.describe_components, (True, False))
        C.check_choice("num_actions", self.num_actions, (8, 10))
        C.check_choice("num_hops", self.num_hops, (1, 2, 3))
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")

    @property
    def ctype(self) -> jax.Array:
        """[K] int32 component type of each candidate slot."""
        return jnp.asarray(ORDER[(self.component_set, self.num_actions)], jnp.int32)

    @property
    def costs(self) -> jax.Array:
        """[K] float32 execution tokens of each candidate."""
        comps = COMPONENTS[self.component_set]
        return jnp.asarray([comps[t][2] for t in ORDER[(self.component_set, self.num_actions)]],
                           jnp.float32)


@chex.dataclass(frozen=True)
class RagWorkflowState:
    key: chex.PRNGKey
    turn: chex.Array           # [] int32
    done: chex.Array           # [] bool
    qtype: chex.Array          # [] int32 Question
    hops: chex.Array           # [] int32 1..H
    diff: chex.Array           # [H] int32 0 easy, 1 hard (hidden)
    status: chex.Array         # [H] int32 Hop
    wrong: chex.Array          # [H] bool wrong fact (hidden)
    bridge: chex.Array         # [H] bool bridge entity of hop h extracted
    flags: chex.Array          # [4] bool, indexed by Flag
    answered: chex.Array       # [] bool
    f1: chex.Array             # [] float32
    cost: chex.Array           # [] float32 execution tokens so far
    hist: chex.Array           # [3] int32 component types of the last 3 calls (-1 none)
    hist_out: chex.Array       # [3] int32 their outcomes


class RagWorkflow(C.TextEnvironment):
    name = "rag_workflow"
    params_cls = RagWorkflowParams

    def __init__(self, params: RagWorkflowParams | None = None):
        params = RagWorkflowParams.small() if params is None else params
        params.validate()
        self.params = params
        self.H = params.num_hops
        self.num_actions = params.num_actions
        self.action_len = params.action_len
        self.obs_len = params.obs_len
        self.feedback_len = params.feedback_len
        self.max_turns = params.max_turns
        self._init_text()
        comps = COMPONENTS[params.component_set]
        self.order = np.asarray(ORDER[(params.component_set, self.num_actions)], np.int32)
        A = self.action_len
        names = [c[0] for c in comps]
        self.t_cand = C.encode_table([f"now call the {names[t]} tool" for t in self.order], A,
                                     eos=True)
        self.w_name = C.encode_table(names, 1)[:, 0]                          # [10] by type
        self.t_desc = C.encode_table([f"{names[t]} {comps[t][1]}" for t in self.order], 4)
        wid = lambda w: int(C.encode(w, 1)[0])
        self.w_out = np.asarray([wid(w) for w in OUTCOMES], np.int32)
        self.w_status = np.asarray([wid(w) for w in STATUS_WORDS], np.int32)
        self.w_hop = np.asarray([wid(f"h{i + 1}") for i in range(3)], np.int32)
        self.w_num = np.asarray([wid(w) for w in C.NUMBER_WORDS], np.int32)
        self.w_flag = np.asarray([wid(w) for w in ("decomposed", "rewritten", "reranked",
                                                   "verified")], np.int32)
        self.w = {w: wid(w) for w in ("bridge", "comparison", "question", "hops", "evidence",
                                      "history", "turn", ":", "f1")}
        self._freeze_tables()

    # ------------------------------------------------------------------ protocol
    def reset_env(self, key, params) -> RagWorkflowState:
        H = self.H
        key, k1, k2, k3 = jax.random.split(key, 4)
        return RagWorkflowState(
            key=key, turn=jnp.zeros((), jnp.int32), done=jnp.zeros((), bool),
            qtype=(~jax.random.bernoulli(k1, params.p_bridge)).astype(jnp.int32),
            hops=(jax.random.choice(k2, H, p=params.hop_probs) + 1).astype(jnp.int32),
            diff=jax.random.bernoulli(k3, params.p_hard, (H,)).astype(jnp.int32),
            status=jnp.full((H,), Hop.NONE, jnp.int32), wrong=jnp.zeros((H,), bool),
            bridge=jnp.zeros((H,), bool), flags=jnp.zeros((4,), bool),
            answered=jnp.zeros((), bool), f1=jnp.zeros((), jnp.float32),
            cost=jnp.zeros((), jnp.float32), hist=jnp.full((3,), -1, jnp.int32),
            hist_out=jnp.zeros((3,), jnp.int32))

    def legal_actions(self, state, params):
        return jnp.asarray(self.t_cand), jnp.ones((self.num_actions,), bool)

    def action_costs(self, state, params):
        """[K] float32 execution tokens of each candidate component (strongly unequal)."""
        return params.costs

    # ------------------------------------------------------------------ dynamics
    def transition(self, s: RagWorkflowState, idx, rng, params):
        H = self.H
        ar = jnp.arange(H)
        in_q = ar < s.hops
        bridge_q = s.qtype == Question.BRIDGE
        dec, rew = s.flags[Flag.DECOMPOSED], s.flags[Flag.REWRITTEN]
        rr, ver = s.flags[Flag.RERANKED], s.flags[Flag.VERIFIED]
        t = params.ctype[idx]
        u = jax.random.uniform(rng, (3,))
        first = lambda m: (jnp.argmax(m), jnp.any(m))

        # retrieve / deep retrieve: the next hop without docs.
        h, has_ret = first(in_q & (s.status == Hop.NONE))
        gate = jnp.where(bridge_q & (h > 0) & ~s.bridge[jnp.maximum(h - 1, 0)],
                         params.bridge_gate, 1.0)
        base = jnp.where(t == DEEP, params.p_deep[s.diff[h]], params.p_ret[s.diff[h]])
        p = jnp.minimum(0.98, base + params.boost_decomp * dec + params.boost_rewrite * rew)
        found = has_ret & (u[0] < p * gate)
        st_ret = s.status.at[h].set(jnp.where(found, Hop.DOCS, s.status[h]))
        out_ret = jnp.where(~has_ret, USELESS, jnp.where(found, FOUND, MISSED))
        # read: the first hop with docs.
        hr, has_read = first(in_q & (s.status == Hop.DOCS))
        read_ok = has_read & ((u[1] < params.p_read) | rr)
        q_wrong = params.p_wrong[s.diff[hr]] * jnp.where(dec, 0.5, 1.0) * jnp.where(rr, 0.5, 1.0)
        inherit = bridge_q & (hr > 0) & s.wrong[jnp.maximum(hr - 1, 0)]
        st_read = s.status.at[hr].set(jnp.where(read_ok, Hop.FACT, s.status[hr]))
        wr_read = s.wrong.at[hr].set(jnp.where(read_ok, (u[2] < q_wrong) | inherit, s.wrong[hr]))
        out_read = jnp.where(~has_read, USELESS, jnp.where(read_ok, OK, FAILED))
        # extract bridge entity of the first read hop that lacks one.
        hb, has_b = first(bridge_q & (ar < s.hops - 1) & (s.status == Hop.FACT) & ~s.bridge)
        br_ext = s.bridge.at[hb].set(s.bridge[hb] | has_b)
        # verify
        hv, has_bad = first(in_q & (s.status == Hop.FACT) & s.wrong)
        complete = jnp.all(~in_q | (s.status == Hop.FACT))
        later = bridge_q & (ar > hv)
        st_ver = jnp.where(ar == hv, Hop.DOCS, jnp.where(later, Hop.NONE, s.status))
        st_ver = jnp.where(has_bad, st_ver, s.status)
        wr_ver = jnp.where(has_bad, s.wrong & (ar < hv), s.wrong)
        br_ver = jnp.where(has_bad, s.bridge & (ar < hv), s.bridge)
        out_ver = jnp.where(has_bad, FLAGGED, jnp.where(complete, PASSED, MISSED))
        # answer
        correct = in_q & (s.status == Hop.FACT) & ~s.wrong
        all_right = jnp.all(correct | ~in_q)
        f1 = jnp.where(all_right, 0.8 + 0.2 * ver,
                       0.4 * jnp.sum(correct) / s.hops).astype(jnp.float32)

        is_ret = (t == RETRIEVE) | (t == DEEP)
        status = jnp.where(is_ret, st_ret, jnp.where(t == READ, st_read,
                                                      jnp.where(t == VERIFY, st_ver, s.status)))
        wrong = jnp.where(t == READ, wr_read, jnp.where(t == VERIFY, wr_ver, s.wrong))
        bridge = jnp.where(t == EXTRACT, br_ext, jnp.where(t == VERIFY, br_ver, s.bridge))
        flags = jnp.stack([       # in Flag order
            dec | (t == DECOMPOSE),
            jnp.where(t == REWRITE, True, jnp.where(is_ret & has_ret, False, rew)),
            jnp.where(t == RERANK, True, jnp.where((t == READ) & has_read, False, rr)),
            ver | ((t == VERIFY) & ~has_bad & complete)])
        outcome = jnp.select(
            [is_ret, t == READ, t == EXTRACT, t == VERIFY, t == ANSWER,
             t == DECOMPOSE, t == REWRITE, t == RERANK],
            [out_ret, out_read, jnp.where(has_b, OK, USELESS), out_ver, ANSWERED,
             jnp.where(dec, USELESS, OK), jnp.where(rew, USELESS, OK),
             jnp.where(rr, USELESS, OK)], OK).astype(jnp.int32)
        answered = t == ANSWER
        cost = s.cost + params.costs[idx]
        s2 = s.replace(status=status, wrong=wrong, bridge=bridge, flags=flags,
                       answered=answered, done=answered, f1=jnp.where(answered, f1, s.f1),
                       cost=cost,
                       hist=jnp.concatenate([s.hist[1:], t[None].astype(jnp.int32)]),
                       hist_out=jnp.concatenate([s.hist_out[1:], outcome[None]]))
        reward = jnp.where(answered, f1 - params.lam * cost / 1000.0, 0.0)
        # feedback: "{name} : {outcome} [h{hop}]" or "{name} : answered f1 {F1 x 100}"
        hop_of = jnp.where(is_ret, h, jnp.where(t == READ, hr, jnp.where(
            t == EXTRACT, hb, jnp.where(t == VERIFY, hv, -1))))
        show_hop = (hop_of >= 0) & (outcome != USELESS) & ~((t == VERIFY) & ~has_bad)
        f1_word = jnp.asarray(self.w_num)[jnp.clip(jnp.round(f1 * 100).astype(jnp.int32), 0, 100)]
        fb = C.render([
            [jnp.asarray(self.w_name)[t], self.w[":"], jnp.asarray(self.w_out)[outcome]],
            jnp.where(show_hop, jnp.asarray(self.w_hop)[jnp.clip(hop_of, 0, 2)], PAD_ID)[None],
            jnp.where(answered, jnp.asarray([self.w["f1"], 0]).at[1].set(f1_word), PAD_ID)],
            self.feedback_len)
        return s2, fb, reward.astype(jnp.float32)

    def on_timeout(self, s: RagWorkflowState, feedback, params):
        """Turn limit without an answer: F1 = 0, the last reward is -lam * tokens / 1000."""
        return s, feedback, -params.lam * s.cost / 1000.0

    def observe(self, s: RagWorkflowState, params) -> jax.Array:
        """[O] int32: the observation tokens of state `s` (what reset/step return)."""
        w, H = self.w, self.H
        ar = jnp.arange(H)
        in_q = ar < s.hops
        q = [jnp.where(s.qtype == Question.BRIDGE, w["bridge"], w["comparison"]), w["question"],
             jnp.asarray(self.w_num)[s.hops], w["hops"]]
        ev = jnp.stack([jnp.asarray(self.w_hop)[:H], jnp.asarray(self.w_status)[s.status]], 1)
        ev = jnp.where(in_q[:, None], ev, PAD_ID).reshape(-1)
        hist = jnp.stack([jnp.asarray(self.w_name)[jnp.maximum(s.hist, 0)],
                          jnp.asarray(self.w_out)[s.hist_out]], 1)
        hist = jnp.where((s.hist >= 0)[:, None], hist, PAD_ID).reshape(-1)
        pending = slice(Flag.DECOMPOSED, Flag.VERIFIED)         # shown after the history
        flags = jnp.where(s.flags[pending], jnp.asarray(self.w_flag)[pending], PAD_ID)
        segs = [q, [SEP_ID, w["evidence"]], ev,
                jnp.where(s.flags[Flag.VERIFIED], jnp.asarray(self.w_flag)[Flag.VERIFIED],
                          PAD_ID)[None],
                [SEP_ID, w["history"]], hist, flags,
                [w["turn"], jnp.asarray(self.w_num)[s.turn]]]
        if self.params.describe_components:
            segs += [[SEP_ID], jnp.asarray(self.t_desc).reshape(-1)]
        return C.render(segs, self.obs_len)

    def info(self, s: RagWorkflowState, params):
        utility = s.f1 - params.lam * s.cost / 1000.0
        return C.info_dict(success=s.answered & (s.f1 >= 0.8), score=utility, f1=s.f1,
                           exec_cost=s.cost, utility=utility)


def expert_policy(s: RagWorkflowState, params: RagWorkflowParams, key=None) -> jax.Array:
    """Privileged scripted expert (sees difficulty and wrong facts): [] int32 slot index.

    decompose first when a multi-hop question has a hard hop; read pending docs; verify
    as soon as a fact is wrong; extract the bridge entity before the next bridge hop;
    deep_retrieve hard hops, retrieve easy ones; verify, then answer (answer at once on
    the last turn).
    """
    H = s.status.shape[-1]
    ar = jnp.arange(H)
    in_q = ar < s.hops
    slot = lambda t: jnp.argmax(params.ctype == t).astype(jnp.int32)
    has_docs = jnp.any(in_q & (s.status == Hop.DOCS))
    has_bad = jnp.any(in_q & (s.status == Hop.FACT) & s.wrong)
    extractable = jnp.any((s.qtype == Question.BRIDGE) & (ar < s.hops - 1)
                          & (s.status == Hop.FACT) & ~s.bridge)
    todo = in_q & (s.status == Hop.NONE)
    h = jnp.argmax(todo)
    need_dec = (s.hops >= 2) & ~s.flags[Flag.DECOMPOSED] & jnp.any(in_q & (s.diff == 1))
    a_ret = jnp.where(need_dec, slot(DECOMPOSE),
                      jnp.where(s.diff[h] == 1, slot(DEEP), slot(RETRIEVE)))
    a = jnp.select(
        [s.turn >= params.max_turns - 1, has_docs, has_bad, extractable, jnp.any(todo),
         ~s.flags[Flag.VERIFIED]],
        [slot(ANSWER), slot(READ), slot(VERIFY), slot(EXTRACT), a_ret, slot(VERIFY)],
        slot(ANSWER))
    return a.astype(jnp.int32)


def random_policy(state: RagWorkflowState, params, key) -> jax.Array:
    """Uniform random index among the (all legal) candidates: [] int32."""
    return C.uniform_policy(jnp.ones(params.ctype.shape, bool), key)


def greedy_policy(s: RagWorkflowState, params, key=None) -> jax.Array:
    """A cheap greedy workflow (baseline that should lose): retrieve, read, extract the
    bridge entity when needed, answer as soon as every hop has a fact; never decomposes,
    rewrites, deep-retrieves or verifies. [] int32 slot index."""
    H = s.status.shape[-1]
    ar = jnp.arange(H)
    in_q = ar < s.hops
    slot = lambda t: jnp.argmax(params.ctype == t).astype(jnp.int32)
    extractable = jnp.any((s.qtype == Question.BRIDGE) & (ar < s.hops - 1)
                          & (s.status == Hop.FACT) & ~s.bridge)
    a = jnp.select([s.turn >= params.max_turns - 1, jnp.any(in_q & (s.status == Hop.DOCS)),
                    extractable, jnp.any(in_q & (s.status == Hop.NONE))],
                   [slot(ANSWER), slot(READ), slot(EXTRACT), slot(RETRIEVE)], slot(ANSWER))
    return a.astype(jnp.int32)
