"""Which question each episode plays, for an environment with a question pool split into
train / val / test (ragspace): the ASCT paper's iterations over the training questions and
its greedy evaluation over every test question (arXiv 2609.35215, App. A.2).

An environment that has the `QuestionEnv` methods (directly, or as the `inner` of a view
such as LLMView) can start an episode on a chosen question; any other draws its task in
`reset_env` as before (every function here then returns None).

The walk over the training split (`question_walk`): n = hi - lo questions, G episode
groups a training step. Group g of step k is draw i = k G + g of an endless sequence of
passes over the split, each pass a fresh permutation:

    e = i // n,  j = i mod n,   qid(k, g) = lo + perm_e[j],   perm_e = permutation(key_e, n),
    key_e = fold_in(key, e)

so consecutive steps walk through the split WITHOUT replacement and every pass is
reshuffled; with G = n a step is exactly one pass (the paper's iteration: every training
question once, in a new order). The ids are a pure function of (key, step): a resumed
run continues the same walk.

Evaluation (`evaluation_question_ids`): every question of the split once, in order.
"""
from __future__ import annotations

from typing import Any, Optional, Protocol, Tuple, runtime_checkable

import chex
import jax
import jax.numpy as jnp

# fold_in salt of the walk's key: never a training step, so the walk's stream differs from
# the rollout's fold_in(key, step).
WALK_SALT = 2**31 - 1


@runtime_checkable
class QuestionEnv(Protocol):
    """An environment whose task is a question id of a pool split into train / val / test."""

    def num_questions(self, params: Any) -> int:
        """Size of the pool over every split (static)."""

    def split_range(self, params: Any) -> Tuple[int, int]:
        """[lo, hi): the qids of the split `params` selects (static Python ints)."""

    def reset_question(self, key: chex.PRNGKey, qid: chex.Array, params: Any) -> Any:
        """The initial state of question `qid` ([] int32), carrying `key`."""


def question_env(env: Any) -> Optional[QuestionEnv]:
    """env, or the environment it views (`env.inner`, LLMView), when that is a QuestionEnv;
    else None."""
    while env is not None:
        if isinstance(env, QuestionEnv):
            return env
        env = getattr(env, "inner", None)
    return None


def reset_question(env: Any, key: chex.PRNGKey, qid: chex.Array, params: Any):
    """(state, TimeStep) of question `qid`, as `env.reset` returns them (a view renders its
    TimeStep: env.reset_to)."""
    state = question_env(env).reset_question(key, qid, params)
    return env.reset_to(state, params)


def walk_index(step: chex.Array, num_groups: int, n: int) -> Tuple[chex.Array, chex.Array]:
    """(pass e [G] i32, position j [G] i32) of the G groups of training step `step` ([] i32)
    in the walk over n questions: i = step * G + g, e = i // n, j = i mod n."""
    i = jnp.asarray(step, jnp.int32) * num_groups + jnp.arange(num_groups, dtype=jnp.int32)
    return i // n, i % n


def pass_permutation(key: chex.PRNGKey, e: chex.Array, n: int) -> chex.Array:
    """[n] i32: perm_e, the order of pass e ([] i32) over the n questions."""
    return jax.random.permutation(jax.random.fold_in(key, e), n).astype(jnp.int32)


def question_walk(key: chex.PRNGKey, step: chex.Array, num_groups: int, lo: int,
                  hi: int) -> chex.Array:
    """[G] i32: the question of each group of training step `step` (module docstring):
    lo + perm_e[j] with (e, j) = walk_index(step, G, hi - lo).

    The passes a step touches are e0 .. e0 + E - 1 with e0 = (step * G) // n and the
    static E = (G - 1) // n + 2, so only E permutations of n are drawn per step."""
    n = hi - lo
    e, j = walk_index(step, num_groups, n)
    e0 = e[0]
    span = (num_groups - 1) // n + 2
    perms = jax.vmap(lambda d: pass_permutation(key, e0 + d, n))(jnp.arange(span))  # [E, n]
    return lo + perms[e - e0, j]                                     # qid = lo + perm_e[j]


def step_question_ids(env: Any, params: Any, key: chex.PRNGKey, step: chex.Array,
                      num_groups: int) -> Optional[chex.Array]:
    """[num_groups] i32: the questions of training step `step` (question_walk over the split
    `params` selects, keyed by fold_in(key, WALK_SALT): pass the run's key, the same every
    step); None for an environment without a question split (reset_env draws the task)."""
    qenv = question_env(env)
    if qenv is None:
        return None
    lo, hi = qenv.split_range(params)
    return question_walk(jax.random.fold_in(key, WALK_SALT), step, num_groups, lo, hi)


def evaluation_question_ids(env: Any, params: Any,
                            max_episodes: Optional[int] = None) -> Optional[chex.Array]:
    """[n] i32: every question of the split `params` selects once, in order (the paper's
    greedy evaluation over the test split); n = hi - lo, or its first `max_episodes` (a
    reduced scale). The evaluation plays n episodes of group size 1. None for an
    environment without a question split."""
    qenv = question_env(env)
    if qenv is None:
        return None
    lo, hi = qenv.split_range(params)
    if max_episodes is not None:
        hi = min(hi, lo + int(max_episodes))
    return jnp.arange(lo, hi, dtype=jnp.int32)
