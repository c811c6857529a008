"""TinyWorkflow: a tiny deterministic staged workflow built for the search's tests
(independent of the real workflow environments), and jitted paper searches on it and on
ToyTree.

TinyWorkflow's WorkflowTree (P = 10 prefixes, K = 3 candidates; -> child, [nominal tokens]):

    0 -a0-> 1 [10]  -a0-> 3 (T) [1]
                    -a1-> 4 (T) [3]
      -a1-> 2 [20]  -a0-> 5 [5]  -a0-> 6 (T) [2]
                                 -a1-> 7 (T) [4]
                    -a1-> 8 (T) [7]
      -a2-> 9 (T) [30]

Reward: utility[q, p] on reaching a terminal prefix p, else 0; an illegal candidate ends
the episode with reward -100 (so an illegal continuation step shows in Q). Realized cost
of (p, a) for question q: edge_tokens[p, a] + q (the ledger charges these, T_hat reads the
nominal edge_tokens), in two categories (cost_parts): "component" edge_tokens[p, a],
"question" q.

Chat lengths (TINY_CHAT, for the actor-scoring ledger's chat units): every word 2 tokens
after a space, 1 without (PAD and EOS 0), a prompt of 7 template tokens, a label ends
with 1 end-of-turn token. The observation [BOS, 16 + node, 8 + turn, EOS] is then
1 + 2 + 2 = 5 tokens (12 with the template), a label [5 + k, EOS] 1 + 1 = 2.
"""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax import search as S
from asct_jax.envs.base import BOS_ID, EOS_ID, PAD_ID, Environment
from asct_jax.envs.toy_tree import ToyTree
from asct_jax.envs.workflow import WorkflowTree
from asct_jax.search.methods import paper_rules
from asct_jax.search.scoring import ChatLengths

P, K, Q = 10, 3, 2
POISON = -100.0


@chex.dataclass(frozen=True)
class WFParams:
    children: chex.Array    # [P, K] i32
    terminal: chex.Array    # [P] bool
    edge_tokens: chex.Array  # [P, K] f32
    depth: chex.Array       # [P] i32
    utility: chex.Array     # [Q, P] f32


@chex.dataclass(frozen=True)
class WFState:
    qid: chex.Array
    node: chex.Array
    turn: chex.Array
    done: chex.Array
    key: chex.PRNGKey


class TinyWorkflow(Environment):
    name = "tiny_workflow"
    num_actions, action_len, obs_len, feedback_len, max_turns = K, 3, 6, 2, 3
    cost_parts = ("component", "question")

    def default_params(self):
        return make_params()

    def reset_env(self, key, params):
        return WFState(qid=jnp.int32(0), node=jnp.int32(0), turn=jnp.int32(0),
                       done=jnp.array(False), key=key)

    def step_env(self, state, action, key, params):
        k = jnp.clip(action[0] - 5, 0, K - 1)
        child = params.children[state.node, k]
        ok = child >= 0
        node = jnp.where(ok, child, state.node)
        term = ok & params.terminal[node]
        reward = jnp.where(ok, jnp.where(term, params.utility[state.qid, node], 0.0), POISON)
        fb = jnp.array([5, EOS_ID], jnp.int32)
        return state.replace(node=node, done=term | ~ok), fb, reward.astype(jnp.float32)

    def observe(self, state, params):
        return jnp.array([BOS_ID, 16 + state.node, 8 + state.turn, EOS_ID, PAD_ID, PAD_ID],
                         jnp.int32)

    def info(self, state, params):
        return {"success": jnp.float32(0.0), "score": jnp.float32(0.0)}

    def legal_actions(self, state, params):
        cands = jnp.stack([jnp.arange(K) + 5, jnp.full((K,), EOS_ID), jnp.full((K,), PAD_ID)], 1)
        return cands.astype(jnp.int32), (params.children[state.node] >= 0) & ~state.done

    def action_costs(self, state, params):
        return params.edge_tokens[state.node] + state.qid.astype(jnp.float32)

    def action_cost_parts(self, state, params):
        q = jnp.full((K,), state.qid.astype(jnp.float32))
        return jnp.stack([params.edge_tokens[state.node], q], axis=1)      # [K, 2]

    def workflow(self, params):
        return WorkflowTree(params.children, params.terminal, params.edge_tokens, params.depth)

    def workflow_node(self, state, params):
        return state.node

    def question_id(self, state, params):
        return state.qid

    def num_questions(self, params):
        return Q


WF = TinyWorkflow()
_WORD_LEN = np.tile(np.array([[2, 1]], np.int32), (32, 1))
_WORD_LEN[[PAD_ID, EOS_ID]] = 0
TINY_CHAT = ChatLengths(word_len=_WORD_LEN, punct=np.zeros(32, bool), prompt=7, end_of_turn=1)


def make_params(children=None, edge=None, utility=None):
    """The module docstring's tree (or the given tables)."""
    if children is None:
        children = np.full((P, K), -1)
        children[0] = [1, 2, 9]
        children[1, :2] = [3, 4]
        children[2, :2] = [5, 8]
        children[5, :2] = [6, 7]
    if edge is None:
        edge = np.zeros((P, K))
        edge[0], edge[1, :2], edge[2, :2], edge[5, :2] = [10, 20, 30], [1, 3], [5, 7], [2, 4]
    if utility is None:
        utility = np.linspace(0.1, 0.9, Q * P).reshape(Q, P)
    children = np.asarray(children)
    terminal = np.zeros(P, bool)
    depth = np.zeros(P, np.int32)
    for p in range(P):  # parents have lower ids
        for c in children[p]:
            if c >= 0:
                depth[c] = depth[p] + 1
    reached = np.isin(np.arange(P), children[children >= 0])
    terminal = reached & np.all(children < 0, axis=1)
    return WFParams(children=jnp.asarray(children, jnp.int32), terminal=jnp.asarray(terminal),
                    edge_tokens=jnp.asarray(np.where(children >= 0, edge, 0), jnp.float32),
                    depth=jnp.asarray(depth), utility=jnp.asarray(utility, jnp.float32))


def roots(qids, key=0):
    qids = jnp.asarray(qids, jnp.int32)
    b = qids.shape[0]
    keys = jax.random.split(jax.random.PRNGKey(key), b)
    return WFState(qid=qids, node=jnp.zeros(b, jnp.int32), turn=jnp.zeros(b, jnp.int32),
                   done=jnp.zeros(b, bool), key=keys)


def uniform_policy(env, params):
    def pi(state):
        _, legal = env.legal_actions(state, params)
        return jnp.where(legal, -jnp.log(jnp.maximum(legal.sum(), 1.0)), -jnp.inf), jnp.float32(0)
    return pi


def prefix_costs(params, q):
    """[P] realized cost of the edge into each prefix of question q (0 for the root)."""
    ch, edge = np.asarray(params.children), np.asarray(params.edge_tokens)
    out = np.zeros(P)
    for p in range(P):
        for k in range(K):
            if ch[p, k] >= 0:
                out[ch[p, k]] = edge[p, k] + q
    return out


class Counted:
    """A policy_fn wrapper that counts its (trace-time) calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, state):
        self.calls += 1
        return self.fn(state)


@functools.lru_cache(maxsize=None)
def wf_search(rule, b=12, actor=False, unit=None):
    """One jitted paper search per (rule, B, continuation, unit) on TinyWorkflow; params,
    roots, key and cache are traced inputs (cache=None is its own pytree structure).
    unit: None, no chat tables (t_actor in words); else TINY_CHAT and t_actor in `unit`.
    fn.policy counts the policy_fn calls of the last trace, fn.traces the traces.
    The tests search batches of 3 roots, so that they share compilations."""
    cfg = S.SearchConfig(num_simulations=b, node_policy=actor, actor_unit=unit or "words")
    rules = paper_rules(rule, actor_suffixes=actor)

    @jax.jit
    def fn(params, states, key, cache=None):
        fn.traces += 1
        fn.policy = Counted(uniform_policy(WF, params))
        return S.search(WF, params, states, fn.policy, key, rules, cfg, cache=cache,
                        chat=None if unit is None else TINY_CHAT)

    fn.traces = 0
    return fn


TOY = ToyTree(num_actions=4, depth=3)


@functools.lru_cache(maxsize=None)
def toy_search(rule, b):
    cfg = S.SearchConfig(num_simulations=b)

    @jax.jit
    def fn(params, states, key):
        pi = TOY.policy_fn(params, jnp.zeros((TOY.num_nodes, 4)))
        return S.search(TOY, params, states, pi, key, paper_rules(rule), cfg)

    return fn


def toy_roots(params, b, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), b)
    return jax.vmap(TOY.reset, in_axes=(0, None))(keys, params)[0]


RULES = ("uniform", "uct", "agentuct")


def cost_tree(c_big, u):
    """Root a0, a1, a2 (nominal tokens 10, 10, c_big) -> prefixes 1, 2, 3, each with one
    terminal child 4, 5, 6 (1 token); utility u[a] at the terminal under a."""
    ch = np.full((P, K), -1)
    ch[0] = [1, 2, 3]
    ch[1, 0], ch[2, 0], ch[3, 0] = 4, 5, 6
    edge = np.zeros((P, K))
    edge[0] = [10, 10, c_big]
    edge[1:4, 0] = 1
    util = np.zeros((Q, P))
    util[:, 4:7] = u
    return make_params(children=ch, edge=edge, utility=util)
