"""The rollout batch and the credit-method output every piece of the substrate shares.

Shapes: B episodes, T turns (env.max_turns), A tokens per action, K candidate actions,
O observation tokens, F feedback tokens. Episodes are grouped: B = num_groups * G, the G
episodes of a group start from the same initial state (same reset key), laid out
contiguously (episode i belongs to group i // G).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import chex


@chex.dataclass(frozen=True)
class Rollout:
    """A batch of multi-turn episodes of pi_old.

    Attributes:
      obs: [B, T, O] int32, x_t tokens the policy read at turn t.
      feedback: [B, T, F] int32, o_{t+1}: the feedback after the action of turn t.
      responses: [B, T, A] int32, the tokens y_{t,1..A} the actor answered with (EOS then
        PAD): the chosen candidate's, or the written response (prompts below).
      action_index: [B, T] int32, index of the action among the candidates (-1: none).
      token_mask: [B, T, A] bool, real action tokens (EOS included, PAD excluded) of
        turns that happened.
      turn_mask: [B, T] bool, the turn happened (the episode was not done before it).
      logp_old: [B, T, A] float32, log pi_old(y_{t,j} | x_t, y_{t,<j}) (0 where masked).
      values: [B, T] float32, the critic V_phi(x_t) under the behaviour parameters.
      rewards: [B, T] float32, r_t (0 after done): the environment's reward less the
        actor's invalid-action penalty (FACTOR's authors and the critic-based methods read
        the penalty in the step reward).
      penalties: [B, T] float32, p_t, the invalid-action penalty already in rewards (0 in
        candidates mode and where no turn happened): rewards + penalties is the
        environment's reward. GRPO / GiGPO and kin add it back and take it off the invalid
        step's own copy of the episode return and R_t instead, as verl-agent does.
      dones: [B, T] bool, the episode ended with the action of turn t.
      cand_tokens: [B, T, K, A] int32, candidate actions at x_t (constrained decoding).
      cand_mask: [B, T, K] bool, legal candidates at x_t.
      cand_costs: [B, T, K] float32, auxiliary-token cost of each candidate.
      states: env state pytree with leading [B, T]: the state at x_t (recoverable).
      final_info: dict of [B] float32, the environment's info at the end of the episode.
      group: [B] int32, the group (initial state) each episode belongs to.
      env_calls: [] int32, environment steps taken to collect this batch.
      extras: None, or the pytree one method adds to the batch outside the jitted step
        (its `Method.host_prepare`, on host games); its type is the method's own.
      prompts: None (the candidate-scoring actor reads obs), or [B, T, P] int32, the prompt
        the generating actor read (asct_jax.rl.generation); then `responses` are its
        written responses [B, T, R] and A = R above.
      action_mask: None (every action token is an action token), or [B, T, R] bool, the
        response's action tokens (inside the action tags); the other token_mask tokens
        are non-action tokens (reasoning, tags, end of turn).
      turn_info: dict of [B, T] float32 per-turn statistics of the chooser ("gen/invalid",
        ...), averaged over real turns by rollout.episode_metrics.
    """

    obs: chex.Array
    feedback: chex.Array
    responses: chex.Array
    action_index: chex.Array
    token_mask: chex.Array
    turn_mask: chex.Array
    logp_old: chex.Array
    values: chex.Array
    rewards: chex.Array
    penalties: chex.Array
    dones: chex.Array
    cand_tokens: chex.Array
    cand_mask: chex.Array
    cand_costs: chex.Array
    states: Any
    final_info: Dict[str, chex.Array]
    group: chex.Array
    env_calls: chex.Array
    extras: Optional[Any] = None
    prompts: Optional[chex.Array] = None
    action_mask: Optional[chex.Array] = None
    turn_info: Optional[Dict[str, chex.Array]] = None


def policy_inputs(batch: Rollout) -> chex.Array:
    """What the policy read at each turn: the prompts of a generating actor, else obs."""
    return batch.obs if batch.prompts is None else batch.prompts


def action_tokens(batch: Rollout) -> chex.Array:
    """[B, T, A] bool: the action tokens among token_mask (all of them for candidates)."""
    return batch.token_mask if batch.action_mask is None else batch.token_mask & batch.action_mask


def nonaction_tokens(batch: Rollout) -> chex.Array:
    """[B, T, A] bool: the response tokens outside the action tags (none for candidates)."""
    return batch.token_mask & ~action_tokens(batch)


@chex.dataclass(frozen=True)
class Credit:
    """What a credit method returns: per-token coefficients for the policy loss.

    Attributes:
      coef: [B, T, A] float32, C_{t,j}: the advantage each action token is trained with
        (stop-gradient; 0 where masked).
      value_targets: [B, T] float32, regression targets for the critic / value head.
      metrics: dict of [] float32: at least "aux_tokens" and "env_calls" spent by credit.
      loss_inputs: None, or a pytree the method's losses read: [B, ...] arrays
        (minibatched with the episodes) and [] scalars (the same in every minibatch).
      state: None, or the method's state after an update the credit itself made before
        computing it (a critic step that precedes the credit); the train step hands it
        to `Method.update_state` (StateInputs.credit.state) and never minibatches it.
    """

    coef: chex.Array
    value_targets: chex.Array
    metrics: Dict[str, chex.Array]
    loss_inputs: Optional[Any] = None
    state: Optional[Any] = None


def merge_batch_turns(x: chex.Array) -> chex.Array:
    """[B, T, ...] -> [B * T, ...] (explicit sizes: zero-size trailing axes are fine)."""
    return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])
