"""The environment protocol shared by every JAX-native environment and host adapter.

Gymnax / Jumanji style, for multi-turn text environments with multi-token actions:

    state, ts = env.reset(key, params)
    cands, legal = env.legal_actions(state, params)       # [K, A] tokens, [K] bool
    state, ts = env.step(state, action_tokens, params)     # action_tokens: [A] int32

* The state is a pytree that carries its own PRNG key, its turn counter and its done flag:
  keeping a state is restoring it (recoverability is free).
* Actions are token arrays of fixed length A (`action_len`): the action's tokens, then EOS,
  then PAD. The environment parses them; an unparseable or illegal action is an ordinary
  step with "nothing happens" feedback and zero reward, never an exception.
* After `done`, `step` is absorbing: the state is unchanged, reward 0, done stays True.
* Everything is jit- and vmap-able; static sizes (K, A, O, F, T) are Python ints.

Token ids below are shared by all text environments (see `asct_jax.envs.tokenizer`).
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import chex
import jax
import jax.numpy as jnp

# Staged workflows' prefix tree, re-exported for the environments that build one; the
# search's protocol for them is asct_jax.search.workflow.
from asct_jax.envs.workflow import WorkflowTree  # noqa: F401

# Special token ids of the shared environment vocabulary.
PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
BOS_ID = 3
SEP_ID = 4
SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>", "<bos>", "<sep>")


@chex.dataclass(frozen=True)
class TimeStep:
    """What the agent sees after reset or step.

    Attributes:
      observation: [O] int32, tokens of x_t: the task and the current rendering of the
        history (what the policy reads before choosing its next action).
      feedback: [F] int32, tokens of the feedback o_{t+1} of the last action (PAD-padded;
        all PAD after reset). Credit methods that read the feedback read these.
      reward: [] float32, r_t of the last action.
      done: [] bool.
      info: dict of [] float32 scalars with the same keys for every step of an
        environment; always has "success" and "score" (the environment's headline
        metric: success in {0,1}, graded reward in [0,1] or progress in [0,100]).
    """

    observation: chex.Array
    feedback: chex.Array
    reward: chex.Array
    done: chex.Array
    info: Dict[str, chex.Array]


def tree_select(pred: chex.Array, a: Any, b: Any) -> Any:
    """Elementwise `a if pred else b` over two pytrees of the same structure."""
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


class Environment:
    """Base class: `reset` / `step` do the protocol's bookkeeping once for every environment.

    Subclasses set the static sizes and implement the hooks (gymnax style: `step` wraps
    `step_env`):

      reset_env(key, params) -> state          the first state (turn 0, done False, key)
      step_env(state, action, key, params) -> (state, feedback [F], reward [])
                                               one transition; may set state.done
      observe(state, params) -> [O]            info(state, params) -> dict of [] float32
      legal_actions(state, params) -> ([K, A], [K])

    and may override `on_timeout` (terminal reward / feedback when the turn limit ends the
    episode), `absorbing_feedback` (feedback of a step taken after done) and, setting
    `rationale_len`, `expert_rationale` (the scripted expert's sub-goal in words).

    `step` does: split the state's key (the second half goes to step_env), advance the turn
    counter, end the episode at `max_turns` (calling on_timeout), make done absorbing
    (state unchanged, reward 0, `absorbing_feedback`), and build the TimeStep.
    """

    name: str = "base"
    num_actions: int  # K: candidate actions listed by legal_actions
    action_len: int  # A: tokens per action, EOS and PAD included
    obs_len: int  # O
    feedback_len: int  # F
    max_turns: int  # T: episodes end after at most this many steps
    # The categories of action_cost_parts (e.g. ragspace's generator input / output, query
    # embedding, reranker input); one category "env" unless an environment splits them.
    cost_parts: Tuple[str, ...] = ("env",)
    # L: tokens of expert_rationale (0: the environment has none; warm_start.reasoning
    # "subgoal" needs it).
    rationale_len: int = 0

    def default_params(self) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------------ subclass hooks
    def reset_env(self, key: chex.PRNGKey, params: Any) -> Any:
        """The initial state (carrying `key`, turn 0 and done False)."""
        raise NotImplementedError

    def step_env(self, state: Any, action: chex.Array, key: chex.PRNGKey,
                 params: Any) -> Tuple[Any, chex.Array, chex.Array]:
        """One transition of a not-done state: (new state, feedback [F] int32, reward []).

        `key` is fresh randomness for this step; the bookkeeping (key, turn, turn limit,
        absorbing done) is done by `step`.
        """
        raise NotImplementedError

    def on_timeout(self, state: Any, feedback: chex.Array,
                   params: Any) -> Tuple[Any, chex.Array, chex.Array]:
        """(state, feedback, extra reward) when the turn limit ends an episode."""
        return state, feedback, jnp.zeros((), jnp.float32)

    def absorbing_feedback(self, params: Any) -> chex.Array:
        """[F] int32: the feedback of a step taken after done (all PAD)."""
        return jnp.full((self.feedback_len,), PAD_ID, jnp.int32)

    def info(self, state: Any, params: Any) -> Dict[str, chex.Array]:
        """dict of [] float32 with at least "success" and "score"."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the protocol
    def reset(self, key: chex.PRNGKey, params: Any) -> Tuple[Any, TimeStep]:
        return self.reset_to(self.reset_env(key, params), params)

    def reset_to(self, state: Any, params: Any) -> Tuple[Any, TimeStep]:
        """(state, the TimeStep `reset` returns for it): an initial state made otherwise
        (a chosen question's, asct_jax.envs.questions) starts as a reset one does."""
        return state, TimeStep(
            observation=self.observe(state, params),
            feedback=jnp.full((self.feedback_len,), PAD_ID, jnp.int32),
            reward=jnp.zeros((), jnp.float32),
            done=state.done,
            info=self.info(state, params),
        )

    def step(self, state: Any, action: chex.Array, params: Any) -> Tuple[Any, TimeStep]:
        key, rng = jax.random.split(state.key)
        s1, fb, r = self.step_env(state, action, rng, params)
        s1 = s1.replace(key=key, turn=state.turn + 1)
        timeout = (s1.turn >= self.max_turns) & ~s1.done
        s_to, fb_to, r_to = self.on_timeout(s1, fb, params)
        s1 = tree_select(timeout, s_to, s1)
        fb = jnp.where(timeout, fb_to, fb)
        r = r + jnp.where(timeout, r_to, 0.0)
        s1 = s1.replace(done=s1.done | timeout)
        # Absorbing after done.
        was_done = state.done
        s_out = tree_select(was_done, state, s1)
        return s_out, TimeStep(
            observation=self.observe(s_out, params),
            feedback=jnp.where(was_done, self.absorbing_feedback(params), fb).astype(jnp.int32),
            reward=jnp.where(was_done, 0.0, r).astype(jnp.float32),
            done=s_out.done,
            info=self.info(s_out, params),
        )

    def observe(self, state: Any, params: Any) -> chex.Array:
        """[O] int32: the observation tokens x_t of a state (what reset/step return).

        Search and value calibration restore a stored state and need its observation.
        """
        raise NotImplementedError

    def legal_actions(self, state: Any, params: Any) -> Tuple[chex.Array, chex.Array]:
        """Candidate actions [K, A] int32 and their legality mask [K] bool."""
        raise NotImplementedError

    def action_costs(self, state: Any, params: Any) -> chex.Array:
        """[K] float32: auxiliary-token cost of executing each candidate (search budget)."""
        cands, _ = self.legal_actions(state, params)
        return jnp.sum(cands != PAD_ID, axis=-1).astype(jnp.float32)

    def action_cost_parts(self, state: Any, params: Any) -> chex.Array:
        """[K, C] float32: action_costs by category (C = len(cost_parts); rows sum to it)."""
        return self.action_costs(state, params)[:, None]

    def expert_rationale(self, state: Any, params: Any) -> chex.Array:
        """[rationale_len] int32, PAD-padded: the scripted expert's current sub-goal in the
        environment's own words (a few words; a deterministic function of the state the
        expert reads), what the warm start writes inside the think tags with
        warm_start.reasoning = "subgoal" (asct_jax.rl.warm_start). Only environments with
        rationale_len > 0 have one."""
        raise NotImplementedError(f"{self.name} has no expert_rationale")

    def restorable(self, state: Any, params: Any) -> chex.Array:
        """[K] bool: False for actions with side effects that cannot be searched from."""
        return jnp.ones((self.num_actions,), bool)

    @property
    def tokenizer(self):
        """The transformers PreTrainedTokenizerFast for this environment's tokens."""
        raise NotImplementedError


def action_tokens_equal(a: chex.Array, b: chex.Array) -> chex.Array:
    """True where two [..., A] token arrays are the same action (PAD-insensitive)."""
    return jnp.all(a == b, axis=-1)


def match_action(cands: chex.Array, legal: chex.Array, action: chex.Array) -> chex.Array:
    """Index of `action` [A] among `cands` [K, A] (legal only), or -1 if none matches."""
    hit = action_tokens_equal(cands, action[None, :]) & legal
    return jnp.where(jnp.any(hit), jnp.argmax(hit), -1)

