"""ToyTree: a small K-ary decision tree whose exact action values can be enumerated.

The environment is the complete K-ary tree of depth T (= max_turns). Nodes are numbered
in level order: the root is 0 and child k of node n is n * K + k + 1, so a node id is its
action path. At each turn the agent picks one of the K candidates; candidate k is the token
array [5 + k, EOS, PAD, ...]. Per node a fixed table says which candidates are legal and
which ones end the episode (every action at level T - 1 does); each (node, action) edge has
a fixed expected reward (terminal edges: an outcome in [0, 1]; other edges: a small
penalty proportional to the action's token cost), plus optional Gaussian noise on terminal
rewards (`reward_noise`, zero-mean, so exact values do not change). Candidates have
strongly unequal auxiliary-token costs (default 1, 3, 9, 27), which is what AgentUCT is for.

An illegal or unparseable action is an ordinary step where nothing happens (zero reward,
the turn counter advances); after T turns the episode ends whatever the node.

`exact_q(params, policy)` (NumPy) enumerates the first two moments of the return-to-go of
every (node, action) under a fixed policy table, for the tests.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs.base import BOS_ID, EOS_ID, PAD_ID, Environment

ACTION_TOKEN_OFFSET = 5  # candidate k is the token 5 + k
NODE_TOKEN_OFFSET = 16  # observation: node n -> token 16 + n
TURN_TOKEN_OFFSET = 8  # observation: turn t -> token 8 + t (t <= 7)
FEEDBACK_NOTHING = 12  # feedback token: the action did nothing (illegal / unparseable)
FEEDBACK_MOVED = 13  # feedback token: the action was executed
FEEDBACK_DONE = 14  # feedback token: the episode ended

# Constructor arguments of the sizes of `asct_jax.envs.make("toy_tree", size=...)`.
PRESETS = {"small": dict(num_actions=4, depth=3, action_len=3),
           "hard": dict(num_actions=4, depth=4, action_len=3)}


def vocabulary() -> set:
    """No words: toy_tree's observations and actions are raw token ids."""
    return set()


@chex.dataclass(frozen=True)
class ToyTreeParams:
    """Environment tables (all arrays, so one compilation serves every table).

    Attributes:
      legal: [num_nodes, K] bool, candidate k is legal at node n.
      terminates: [num_nodes, K] bool, taking k at n ends the episode (True at level T-1).
      rewards: [num_nodes, K] float32, expected reward of taking k at n.
      reward_noise: [] float32, std of the zero-mean Gaussian noise on terminal rewards.
      costs: [K] float32, auxiliary-token cost of each candidate.
      restorable: [K] bool, candidate k may be executed inside a search.
      success_threshold: [] float32, an episode succeeds when its return reaches this.
    """

    legal: chex.Array
    terminates: chex.Array
    rewards: chex.Array
    reward_noise: chex.Array
    costs: chex.Array
    restorable: chex.Array
    success_threshold: chex.Array


@chex.dataclass(frozen=True)
class ToyTreeState:
    node: chex.Array  # [] int32, level-order node id
    turn: chex.Array  # [] int32
    done: chex.Array  # [] bool
    ret: chex.Array  # [] float32, return so far
    key: chex.PRNGKey


class ToyTree(Environment):
    """Depth-T, K-ary toy tree with enumerable values (see the module docstring)."""

    name = "toy_tree"

    @classmethod
    def from_size(cls, size: str = "small", **overrides) -> "ToyTree":
        """The tree of preset `size` (PRESETS) with constructor arguments overridden."""
        from asct_jax.envs import _common as C

        C.check_choice("size", size, tuple(PRESETS))
        C.check_fields(cls.name, overrides, ["size"] + list(PRESETS[size]))
        return cls(**{**PRESETS[size], **overrides})

    def __init__(self, num_actions: int = 4, depth: int = 3, action_len: int = 3):
        if num_actions < 2:
            raise ValueError(f"num_actions must be >= 2, got {num_actions}")
        if not 1 <= depth <= 7:
            raise ValueError(f"depth must be in [1, 7], got {depth}")
        if action_len < 2:
            raise ValueError(f"action_len must be >= 2, got {action_len}")
        self.num_actions = num_actions
        self.depth = depth
        self.max_turns = depth
        self.action_len = action_len
        self.obs_len = 4
        self.feedback_len = 3
        self.num_nodes = (num_actions ** (depth + 1) - 1) // (num_actions - 1)
        # level of every node (level-order numbering).
        lv = np.zeros(self.num_nodes, np.int32)
        for n in range(1, self.num_nodes):
            lv[n] = lv[(n - 1) // num_actions] + 1
        self.levels = lv
        cands = np.full((num_actions, action_len), PAD_ID, np.int32)
        cands[:, 0] = ACTION_TOKEN_OFFSET + np.arange(num_actions)
        cands[:, 1] = EOS_ID
        self._cands = cands

    # ----------------------------------------------------------------- parameters
    def make_params(
        self,
        seed: int = 0,
        costs=None,
        legal_prob: float = 0.75,
        early_stop_prob: float = 0.2,
        step_penalty: float = 0.005,
        reward_noise: float = 0.0,
        success_threshold: float = 0.5,
    ) -> ToyTreeParams:
        """Random (seeded, NumPy) tables: >= 1 legal candidate per non-leaf node."""
        k, n = self.num_actions, self.num_nodes
        rng = np.random.default_rng(seed)
        if costs is None:
            costs = 3.0 ** np.arange(k)  # 1, 3, 9, 27: strongly unequal
        costs = np.asarray(costs, np.float32)
        legal = rng.random((n, k)) < legal_prob
        forced = rng.integers(0, k, size=n)
        legal[np.arange(n), forced] = True
        legal[self.levels == self.depth] = False  # leaves have no actions
        terminates = rng.random((n, k)) < early_stop_prob
        terminates[self.levels == self.depth - 1] = True
        rewards = np.where(
            terminates,
            rng.random((n, k)),
            -step_penalty * costs[None, :],
        ).astype(np.float32)
        return ToyTreeParams(
            legal=jnp.asarray(legal),
            terminates=jnp.asarray(terminates),
            rewards=jnp.asarray(rewards),
            reward_noise=jnp.float32(reward_noise),
            costs=jnp.asarray(costs),
            restorable=jnp.ones((k,), bool),
            success_threshold=jnp.float32(success_threshold),
        )

    def default_params(self) -> ToyTreeParams:
        return self.make_params(seed=0)

    # ------------------------------------------------------------------ protocol
    def _observation(self, node, turn):
        return jnp.array(
            [BOS_ID, NODE_TOKEN_OFFSET + node, TURN_TOKEN_OFFSET + turn, EOS_ID], jnp.int32
        )

    def observe(self, state: ToyTreeState, params: ToyTreeParams) -> chex.Array:
        """[O] int32: the observation tokens of a state (what reset/step return)."""
        return self._observation(state.node, state.turn)

    def info(self, state: ToyTreeState, params: ToyTreeParams) -> Dict[str, chex.Array]:
        success = state.done & (state.ret >= params.success_threshold)
        return {"success": success.astype(jnp.float32), "score": state.ret.astype(jnp.float32)}

    def reset_env(self, key: chex.PRNGKey, params: ToyTreeParams) -> ToyTreeState:
        return ToyTreeState(
            node=jnp.int32(0),
            turn=jnp.int32(0),
            done=jnp.array(False),
            ret=jnp.float32(0.0),
            key=key,
        )

    def parse_action(self, action: chex.Array) -> Tuple[chex.Array, chex.Array]:
        """[A] tokens -> (candidate index k (clipped to [0, K)), well_formed bool)."""
        chex.assert_shape(action, (self.action_len,))
        k = action[0] - ACTION_TOKEN_OFFSET
        ok = (k >= 0) & (k < self.num_actions) & (action[1] == EOS_ID)
        ok = ok & jnp.all(action[2:] == PAD_ID)
        return jnp.clip(k, 0, self.num_actions - 1).astype(jnp.int32), ok

    def _feedback(self, token) -> chex.Array:
        return jnp.full((self.feedback_len,), PAD_ID, jnp.int32).at[0].set(token).at[1].set(EOS_ID)

    def step_env(self, state: ToyTreeState, action: chex.Array, key: chex.PRNGKey,
                 params: ToyTreeParams):
        k, ok = self.parse_action(action)
        node = state.node
        legal = ok & params.legal[node, k] & ~state.done
        terminates = params.terminates[node, k]
        noise = params.reward_noise * jax.random.normal(key, (), jnp.float32)
        reward = jnp.where(legal, params.rewards[node, k] + jnp.where(terminates, noise, 0.0), 0.0)
        done = legal & terminates
        new = state.replace(
            node=jnp.where(legal, node * self.num_actions + k + 1, node).astype(jnp.int32),
            done=done,
            ret=state.ret + reward,
        )
        fb = self._feedback(jnp.where(done, FEEDBACK_DONE,
                                      jnp.where(legal, FEEDBACK_MOVED, FEEDBACK_NOTHING)))
        return new, fb, reward

    def on_timeout(self, state: ToyTreeState, feedback, params: ToyTreeParams):
        return state, self._feedback(FEEDBACK_DONE), jnp.zeros((), jnp.float32)

    def absorbing_feedback(self, params: ToyTreeParams) -> chex.Array:
        return self._feedback(FEEDBACK_DONE)

    def legal_actions(self, state: ToyTreeState, params: ToyTreeParams):
        legal = params.legal[state.node] & ~state.done
        return jnp.asarray(self._cands), legal

    def action_costs(self, state: ToyTreeState, params: ToyTreeParams) -> chex.Array:
        return params.costs.astype(jnp.float32)

    def restorable(self, state: ToyTreeState, params: ToyTreeParams) -> chex.Array:
        return params.restorable

    # ------------------------------------------------------------ test helpers
    def policy_fn(
        self,
        params: ToyTreeParams,
        logits: chex.Array,
        values: Optional[chex.Array] = None,
    ) -> Callable[[ToyTreeState], Tuple[chex.Array, chex.Array]]:
        """A table policy: logits [num_nodes, K] (masked to legal), values [num_nodes]."""
        logits = jnp.asarray(logits, jnp.float32)
        vals = None if values is None else jnp.asarray(values, jnp.float32)

        def fn(state):
            _, legal = self.legal_actions(state, params)
            lg = jnp.where(legal, logits[state.node], -jnp.inf)
            logp = jax.nn.log_softmax(jnp.where(jnp.any(legal), lg, 0.0))
            logp = jnp.where(legal, logp, -jnp.inf)
            v = jnp.float32(0.0) if vals is None else jnp.where(state.done, 0.0, vals[state.node])
            return logp, v

        return fn

    def policy_probs(self, params: ToyTreeParams, logits) -> np.ndarray:
        """[num_nodes, K] NumPy probabilities of the table policy (0 where illegal)."""
        legal = np.asarray(params.legal)
        lg = np.where(legal, np.asarray(logits, np.float64), -np.inf)
        mx = np.max(np.where(legal, lg, -1e30), axis=1, keepdims=True)
        e = np.where(legal, np.exp(lg - mx), 0.0)
        z = e.sum(1, keepdims=True)
        return np.where(z > 0, e / np.maximum(z, 1e-300), 0.0)

    def exact_q(self, params: ToyTreeParams, policy) -> Dict[str, np.ndarray]:
        """Exact return-to-go moments under a fixed policy (NumPy enumeration).

        Args:
          params: the environment tables.
          policy: [num_nodes, K] action probabilities (renormalised over legal actions).
            A node reached at turn t is always at level t on legal paths, so the table
            indexed by node is a complete Markov policy.

        Returns: dict of float64 arrays
          q [num_nodes, K]: E[sum of rewards from taking k at n, then policy], NaN if illegal;
          q2 [num_nodes, K]: E[(that return)^2] (for tolerances), NaN if illegal;
          v, v2 [num_nodes]: the same under the policy at n (0 at leaves / no legal action).
        """
        k = self.num_actions
        legal = np.asarray(params.legal)
        term = np.asarray(params.terminates)
        rew = np.asarray(params.rewards, np.float64)
        sig2 = float(params.reward_noise) ** 2
        pol = np.where(legal, np.asarray(policy, np.float64), 0.0)
        z = pol.sum(1, keepdims=True)
        pol = np.where(z > 0, pol / np.maximum(z, 1e-300), 0.0)
        n = self.num_nodes
        q = np.full((n, k), np.nan)
        q2 = np.full((n, k), np.nan)
        v = np.zeros(n)
        v2 = np.zeros(n)
        for node in range(n - 1, -1, -1):  # children have larger ids than parents
            if self.levels[node] >= self.depth:
                continue
            for a in range(k):
                if not legal[node, a]:
                    continue
                r = rew[node, a]
                if term[node, a]:
                    q[node, a], q2[node, a] = r, r * r + sig2
                else:
                    c = node * k + a + 1
                    q[node, a] = r + v[c]
                    q2[node, a] = r * r + 2 * r * v[c] + v2[c]
            p = pol[node]
            v[node] = np.nansum(p * np.nan_to_num(q[node]))
            v2[node] = np.nansum(p * np.nan_to_num(q2[node]))
        return {"q": q, "q2": q2, "v": v, "v2": v2}
