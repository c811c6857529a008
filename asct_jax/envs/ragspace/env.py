"""`RagSpace`, the text environment of the RAGSpace-workflow analogue: tokens in and out
over the simulator (the package docstring has the model)."""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs import _common as C
from asct_jax.envs.base import PAD_ID, SEP_ID, WorkflowTree
from asct_jax.envs.ragspace import scripted
from asct_jax.envs.ragspace.simulator import (COST_PARTS, after_retrieval, answer, edge_cost,
                                              edge_cost_parts, question_features)
from asct_jax.envs.ragspace.spec import (CAL, CHOICE_STAGES, CONTEXT, CONTROL, CUE_WORDS,
                                         LABELS, MAX_HOPS, MAX_ROUNDS, PROBE_DESCRIPTIONS,
                                         PROBE_LABEL, RERANK, RETRIEVER, STAGES, WIDTH, Qtype,
                                         R, RagSpaceParams, RagSpaceState, num_legal)
from asct_jax.envs.ragspace.workflows import workflow_tree


def vocabulary() -> set:
    words = C.words_of("stage chosen round evidence found missed hops h1 h2 h3 h4 done :",
                       "f1 ok bridge comparison", PROBE_LABEL, *PROBE_DESCRIPTIONS.values(),
                       *STAGES, *(w for c in CUE_WORDS for w in c))
    for stage in LABELS:
        for label, desc in stage:
            words |= C.words_of(label, desc)
    return words


class RagSpace(C.TextEnvironment):
    """The RAGSpace-workflow analogue (see the package docstring)."""

    name = "ragspace"
    params_cls = RagSpaceParams
    cost_parts = COST_PARTS       # action_cost_parts' categories (the paper's Table 3)

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
        self.n_legal = np.asarray([num_legal(s, 0, K) for s in range(8)], np.int32)
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

    @classmethod
    def _module(cls):
        """The module of the scripted policies (`scripted_policy`, `expert_policy`)."""
        return scripted

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

    def split_range(self, params):
        """[lo, hi): the qids of `params.split` (asct_jax.envs.questions.QuestionEnv)."""
        return params.split_range()

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

    def action_cost_parts(self, state, params):
        """[K, 4] float32: action_costs by category (COST_PARTS; 0 illegal)."""
        s = state
        _, parts = edge_cost_parts(s.stage, jnp.arange(self.num_actions)[:, None],
                                   s.choice[0], s.choice[1], s.choice[2], s.choice[3],
                                   s.rounds, jnp.sum(s.found), s.q_words, s.q_tok)
        return jnp.where(self._legal(state)[:, None], parts[:, 0], 0.0)

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
        s_ret = after_retrieval(s1, s.rounds + 1)
        in_ctx, f1 = answer(s1, idx)
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
