"""A warm start shared by every method: supervised fine-tuning (SFT) of the actor on
episodes of the environment's scripted expert played with exploration noise, then the
value head fitted to Monte-Carlo returns of the warm-started actor.

    params, info = warm_start(run, JaxEnvSource(run))   # run: a RunConfig

Data (`expert_episodes`): at each turn, with probability epsilon a uniformly random legal
candidate, else the expert's (env.expert_policy; a random one too where the expert names
an illegal candidate, as a scripted expert can off its own path: shop). The random
actions stay in the episodes, so the states include the consequences of mistakes and
their feedback, but SFT trains only on the expert's actions (`ExpertBatch.expert`): the
actor learns to imitate the expert from states a noisy actor reaches, recoveries included.

SFT loss (`sft_loss`): the mean over the expert actions' real tokens of -log pi(y_j | x,
y_<j), the constrained log-probs of Policy.action_log_probs. With warm_start.label_smoothing
s > 0 (`smoothed_sft_loss`; candidate-scoring actors) the target is smoothed toward
uniform over the legal labels (label smoothing, Szegedy et al. 2016): q = (1 - s)
onehot(expert) + s / |A(x)|, the loss -sum_a q(a) log pi(a | x), whose minimiser is pi = q:
the expert's label stays the mode (greedy play unchanged) and the actor keeps the
uncertainty of a zero-shot instruct actor (the ASCT table's warm start).

Value fit (`value_fit_loss`):
the warm-started actor plays fresh episodes (asct_jax.rl.rollout.rollout) and V(x_t) is
regressed on the return-to-go G_t (asct_jax.rl.advantages.returns_to_go, gamma =
ppo.gamma: RunConfig.returns); only the value head trains in this phase (the other weights get a zero
update), so the actor the value describes is the one SFT produced.

Reasoning (`warm_start.reasoning`, a generating actor's): "empty" teaches the canonical
turn "<think> </think> <action> c </action> EOS" (every warm start before issue 49);
"subgoal" writes the scripted expert's current sub-goal r inside the think tags, "<think>
r </think> <action> c </action> EOS" (`rationale_writer`; r = env.expert_rationale, a few
of the environment's own words, e.g. shop's "item p2 color red"), so the SFT actor's turns
carry reasoning tokens (FACTOR's non-action branch is no longer ~5 format tokens).

Phases between SFT and the value fit (`WarmStartPhase`, e.g. a method package's reading of
the feedback) are supplied by the caller (`warm_start(run, source, phases)`, filled at the
experiment edge, experiments/harness/warm_start.py): the substrate names none.

Both phases sample `warm_start.batch` turns per step from a fixed batch of episodes
(`sample_turns`) and take one Adam step (warm_start.lr) on one jitted update,
compiled once per phase.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, Protocol, Sequence, Tuple

import chex
import jax
import jax.numpy as jnp
import optax

from asct_jax.envs.base import PAD_ID
from asct_jax.envs.play import Choice, play, take_candidates, uniform_index
from asct_jax.infra.checks import ConfigError
from asct_jax.rl.advantages import returns_to_go
from asct_jax.rl.losses import value_loss
from asct_jax.rl.actor import generation_spec
from asct_jax.rl.generation import GenerationChooser, GenerationSpec, Writer, scripted_writer
from asct_jax.rl.padding import pads_to_right
from asct_jax.rl.rollout import episodes_to_rollout, rollout
from asct_jax.rl.train_step import join_params, split_params
from asct_jax.rl.build import build_policy
from asct_jax.rl.run_config import RunConfig, run_config
from asct_jax.rl.types import Rollout, merge_batch_turns, policy_inputs


@chex.dataclass(frozen=True)
class ExpertBatch:
    """Episodes of the noisy expert.

    rollout: a Rollout [B, T, ...] (logp_old and values are 0: no policy played it).
    expert: [B, T] bool, the turn happened and its action is the expert's (not epsilon's,
      nor a random stand-in for an illegal expert pick).
    """

    rollout: Rollout
    expert: chex.Array


def noisy_expert_index(env, env_params, epsilon: float, imitated: str = "expert"):
    """(key, states, cands, legal) -> (index [N], expert [N] bool): the epsilon-noisy
    expert's candidate and whether it is the expert's own pick. imitated: which scripted
    policy is the expert (the config's warm_start.imitated; env.scripted_policy; "expert"
    default, ragspace's "base" is the paper's default workflow)."""
    policy = env.expert_policy if imitated == "expert" else env.scripted_policy(imitated)

    def pick(key, states, cands, legal):
        n = legal.shape[0]
        k_coin, k_rand, k_exp = jax.random.split(key, 3)
        expert = jax.vmap(policy, in_axes=(0, None, 0))(
            states, env_params, jax.random.split(k_exp, n))
        # A scripted expert off its own path may name an illegal candidate (shop): that
        # turn is played like an epsilon turn and is not trained on.
        legal_pick = jnp.take_along_axis(legal, expert[:, None], axis=1)[:, 0]
        noisy = jax.random.bernoulli(k_coin, epsilon, (n,)) | ~legal_pick
        index = jnp.where(noisy, uniform_index(k_rand, legal), expert).astype(jnp.int32)
        return index, ~noisy
    return pick


def check_reasoning(reasoning: str, env, spec: Optional[GenerationSpec],
                    imitated: str = "expert") -> None:
    """ConfigError (warm_start.reasoning) unless `reasoning` can be written: "subgoal" needs
    a generating actor with a think part in the environment's words, the expert imitated,
    an environment with expert_rationale, and room for it in actor.response_len."""
    if reasoning == "empty":
        return
    bad = lambda problem: ConfigError("warm_start.reasoning",  # noqa: E731
                                      f"{reasoning!r} {problem}", "'empty'")
    if spec is None:
        raise bad("with a candidate-scoring actor (actor.chooser 'candidates'): it writes "
                  "no think part")
    if spec.think != "required":
        raise bad(f"with actor.think {spec.think!r}: no think part to hold it")
    if spec.pieces.tokenizer is not None:
        raise bad("with a pretrained model's tokenizer: the sub-goal is in the "
                  "environment's words")
    if imitated != "expert":
        raise bad(f"with warm_start.imitated {imitated!r}: the sub-goal is the expert's")
    if getattr(env, "rationale_len", 0) <= 0:
        raise bad(f"for {env.name}: it has no expert_rationale (shop, household, science)")
    t = spec.tags
    longest = (len(t.think_open + t.think_close + t.action_open + t.action_close) + 1
               + env.action_len + env.rationale_len)
    if longest > spec.response_len:
        raise ConfigError("actor.response_len", f"{spec.response_len} < {longest}, the "
                          f"longest sub-goal turn of {env.name} (warm_start.reasoning "
                          f"{reasoning!r})", f">= {longest}")


def rationale_writer(spec: GenerationSpec, writer: Writer, rationale: Callable,
                     pad_id: int) -> Writer:
    """`writer` (scripted_writer: "<think> </think> <action> c </action> EOS" [N, R]) with
    rationale(states) [N, L] (PAD-padded words) inside the think tags of the expert's turns
    (extra["expert"]; an epsilon turn, never trained on, keeps the empty think part):
    "<think> r </think> <action> c </action> EOS", right-padded to R (check_reasoning:
    it fits)."""
    n_open = len(spec.tags.think_open)

    def write(key, prompt, cands, legal, states):
        resp, logp, _, value, extra = writer(key, prompt, cands, legal, states)
        why = jnp.where(extra["expert"][:, None], rationale(states), pad_id)    # [N, L]
        out = pads_to_right(jnp.concatenate([resp[:, :n_open], why, resp[:, n_open:]], 1),
                            pad_id)[:, :resp.shape[1]]
        return out, jnp.zeros(out.shape, jnp.float32), out != pad_id, value, extra
    return write


def noisy_expert_chooser(env, env_params, epsilon: float, imitated: str = "expert",
                         spec: Optional[GenerationSpec] = None, pad_id: int = PAD_ID,
                         reasoning: str = "empty"):
    """The epsilon-noisy expert's chooser; extra["expert"] [N]: the action is the expert's.
    spec: a generating actor's (asct_jax.rl.generation): the expert then writes its pick in
    the canonical form "<think> </think> <action> c </action> EOS" after the actor's prompt,
    which is what SFT teaches (the format, and the action inside it); with reasoning
    "subgoal" its sub-goal inside the think tags (rationale_writer)."""
    check_reasoning(reasoning, env, spec, imitated)
    pick = noisy_expert_index(env, env_params, epsilon, imitated)
    if spec is not None:
        writer = scripted_writer(spec, pick, pad_id)
        if reasoning == "subgoal":
            writer = rationale_writer(spec, writer, jax.vmap(
                lambda st: env.expert_rationale(st, env_params)), pad_id)
        return GenerationChooser(spec, writer, pad_id)

    def choose(key, states, ts, cands, legal, costs) -> Choice:
        index, expert = pick(key, states, cands, legal)
        return Choice(response=take_candidates(cands, index), index=index,
                      extra={"expert": expert})
    return choose


def expert_episodes(env, env_params, key: chex.PRNGKey, num_episodes: int,
                    epsilon: float, pad_id: int = PAD_ID, imitated: str = "expert",
                    spec: Optional[GenerationSpec] = None,
                    reasoning: str = "empty") -> ExpertBatch:
    """B = num_episodes episodes of T = env.max_turns turns of the epsilon-noisy expert
    (writing its turns in the generating actor's format if `spec` is given, its think
    part per `reasoning`: noisy_expert_chooser).

    The tasks are those `rollout(policy, params, env, env_params, key, B, 1)` plays (same
    reset keys), so the expert and the random policy (epsilon=1) can be evaluated on the
    held-out tasks of an eval key. Returns an ExpertBatch; jit it with num_episodes static.
    """
    eps = play(env, env_params,
               noisy_expert_chooser(env, env_params, epsilon, imitated, spec, pad_id,
                                    reasoning), key, num_episodes, 1, pad_id)
    data = episodes_to_rollout(eps)
    return ExpertBatch(rollout=data, expert=eps.extra["expert"] & data.turn_mask)


def sample_turns(key: chex.PRNGKey, data: Rollout, weight: chex.Array, batch: int,
                 targets: chex.Array = None) -> Dict[str, chex.Array]:
    """`batch` turns drawn with replacement among those with weight [B, T] > 0.

    Returns {obs [N, O], actions [N, A], cands [N, K, A], legal [N, K], token_mask [N, A],
    targets [N], index [N]: the action's candidate} with N = batch (targets: [B, T] value
    targets, zeros if None); a generating actor's batch gives its prompts as obs and its
    responses as actions.
    """
    w = merge_batch_turns(weight).astype(jnp.float32)
    idx = jax.random.choice(key, w.shape[0], (batch,), p=w / jnp.maximum(jnp.sum(w), 1e-9))
    targets = jnp.zeros(weight.shape, jnp.float32) if targets is None else targets
    pick = lambda x: merge_batch_turns(x)[idx]  # noqa: E731
    return dict(obs=pick(policy_inputs(data)), actions=pick(data.responses),
                cands=pick(data.cand_tokens), legal=pick(data.cand_mask),
                token_mask=pick(data.token_mask), targets=pick(targets),
                index=pick(data.action_index))


def sft_loss(policy, params, mb: Dict[str, chex.Array]) -> chex.Array:
    """Mean over the real tokens of the minibatch's (expert) actions of -log pi(y_j | .)."""
    logp, _, _ = policy.action_log_probs(params, mb["obs"], mb["actions"], mb["cands"],
                                         mb["legal"])
    m = mb["token_mask"].astype(jnp.float32)
    return -jnp.sum(logp * m) / jnp.maximum(jnp.sum(m), 1.0)


def smoothed_targets(index: chex.Array, legal: chex.Array, smoothing) -> chex.Array:
    """[N, K] SFT targets q = (1 - s) onehot(index) + s / |A(x)| on the legal labels, 0 on
    the others (sum 1 over the legal labels). index [N] (a legal candidate), legal [N, K]."""
    chex.assert_shape(index, legal.shape[:1])
    n_legal = jnp.maximum(jnp.sum(legal, -1, keepdims=True), 1).astype(jnp.float32)
    onehot = jax.nn.one_hot(index, legal.shape[-1], dtype=jnp.float32)
    return jnp.where(legal, (1.0 - smoothing) * onehot + smoothing / n_legal, 0.0)


def smoothed_sft_loss(policy, params, mb: Dict[str, chex.Array], smoothing: float
                      ) -> chex.Array:
    """Mean over the minibatch's decisions of -sum_a q(a) log pi(a | x), q the smoothed
    targets of the expert's label (smoothed_targets); pi the actor's distribution over
    the legal labels (Policy.candidate_log_probs)."""
    cand_logp, _, _ = policy.candidate_log_probs(params, mb["obs"], mb["cands"], mb["legal"])
    q = smoothed_targets(mb["index"], mb["legal"], smoothing)
    return -jnp.mean(jnp.sum(q * jnp.where(mb["legal"], cand_logp, 0.0), -1))


def sft_objective(run: RunConfig, policy) -> Callable:
    """The SFT loss of run's warm start: sft_loss, or smoothed_sft_loss with s =
    warm_start.label_smoothing > 0 (ConfigError for a generating actor: it has no label
    distribution to smooth)."""
    s = run.warm_start.label_smoothing
    if s == 0.0:
        return sft_loss
    if generation_spec(policy) is not None:
        raise ConfigError("warm_start.label_smoothing", f"{s} with a generating actor "
                          "(actor.chooser); it smooths a candidate actor's labels", "0.0")
    return functools.partial(smoothed_sft_loss, smoothing=float(s))


def value_fit_loss(policy, params, mb: Dict[str, chex.Array]) -> chex.Array:
    """0.5 (V(x) - G)^2 averaged over the minibatch's turns (G: Monte-Carlo return-to-go)."""
    v = policy.value(params, mb["obs"])
    return value_loss(v[None], mb["targets"][None], jnp.ones((1,) + v.shape, bool))


def make_update(policy, loss: Callable, optimizer: optax.GradientTransformation) -> Callable:
    """Jitted update(params, opt_state, data, weight, targets, key, batch, frozen) ->
    (params, opt_state, loss): one optimiser step on `loss(policy, join(params, frozen),
    minibatch)` of sample_turns(key, data, weight, batch) (batch static; frozen, the LoRA
    base or None, an argument like in the train step, never a compiled-in constant)."""
    def update(params, opt_state, data, weight, targets, key, batch, frozen=None):
        mb = sample_turns(key, data, weight, batch, targets)
        value, grads = jax.value_and_grad(
            lambda p: loss(policy, join_params(p, frozen), mb))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value
    return jax.jit(update, static_argnames=("batch",))


def value_head_only(optimizer: optax.GradientTransformation, params: Any
                    ) -> optax.GradientTransformation:
    """`optimizer` on the value head's leaves, a zero update on every other leaf."""
    labels = jax.tree_util.tree_map_with_path(
        lambda path, _: "value" if "value_head" in jax.tree_util.keystr(path) else "rest",
        params)
    return optax.multi_transform({"value": optimizer, "rest": optax.set_to_zero()}, labels)


def _fit(update, params, opt_state, data, weight, targets, key, steps: int, batch: int,
         frozen: Any = None):
    """`steps` updates; returns (params, first loss, last loss)."""
    losses = []
    for i in range(steps):
        params, opt_state, loss = update(params, opt_state, data, weight, targets,
                                         jax.random.fold_in(key, i), batch=batch,
                                         frozen=frozen)
        if i in (0, steps - 1):
            losses.append(float(loss))
    return params, (losses[0] if losses else float("nan")), (losses[-1] if losses else
                                                             float("nan"))


def fit_value_head(policy, params, played: Rollout, optimizer, key, run: RunConfig,
                   frozen=None):
    """warm_start.value_steps updates of the value head alone on `played`'s Monte-Carlo
    return-to-go (gamma = ppo.gamma); returns (params, first loss, last loss)."""
    ws = run.warm_start
    returns = returns_to_go(played.rewards, played.turn_mask, run.returns.gamma)
    vopt = value_head_only(optimizer, params)
    vfit = make_update(policy, value_fit_loss, vopt)
    return _fit(vfit, params, vopt.init(params), played, played.turn_mask, returns, key,
                ws.value_steps, ws.batch, frozen)


def sft_steps(run: RunConfig) -> int:
    """warm_start.sft_steps of run's environment (ConfigError if it has none)."""
    steps = run.warm_start.sft_steps
    if run.env.name not in steps:
        raise ConfigError(f"warm_start.sft_steps.{run.env.name}", "not set",
                          f"one of {sorted(steps)} or add the environment")
    return int(steps[run.env.name])


class WarmStartPhase(Protocol):
    """A phase between SFT and the value fit, supplied from outside the substrate (a method
    package's, passed by the experiment edge: experiments/harness/warm_start.py). It reads the
    run's warm_start section itself and returns (params, info); a phase its config turns
    off returns the params it got and no info. Jittable work inside is its own."""

    def __call__(self, run: RunConfig, policy, params: Any, data: Rollout, env, env_params,
                 key: chex.PRNGKey, frozen: Any = None) -> Tuple[Any, Dict[str, float]]:
        ...


def warm_start(run: RunConfig, source, phases: Sequence[WarmStartPhase] = ()
               ) -> Tuple[Any, Dict[str, float]]:
    """SFT on the noisy expert, then `phases` in order (WarmStartPhase; each on the
    noisy-expert episodes), then the value head on the actor's returns.

    source: a JaxEnvSource (env, env_params, vocab_size, shape, prompt). Returns (params,
    info): params are what TrainState.params holds for the run's model (with LoRA the
    trainable part; asct_jax.rl.params_io saves them, build_learner's train.init_from
    loads them), info the first / last losses of each phase and the phases' info. Keys:
    fold_in(key(warm_start.seed), 1..4); phase i's fold_in(key(warm_start.seed), 5 + i).
    """
    run = run_config(run)
    ws = run.warm_start
    steps = sft_steps(run)
    policy, params = build_policy(run, source.vocab_size, source.shape, source.prompt)
    check_reasoning(ws.reasoning, source.env, generation_spec(policy), ws.imitated)
    params, frozen = split_params(params)
    key = jax.random.key(ws.seed)
    k_data, k_sft, k_roll, k_value = (jax.random.fold_in(key, i) for i in range(1, 5))

    data = jax.jit(expert_episodes, static_argnums=(0, 3, 5, 6, 7, 8))(
        source.env, source.env_params, k_data, int(ws.episodes), float(ws.epsilon),
        policy.pad_id, ws.imitated, generation_spec(policy), ws.reasoning)
    adam = optax.adam(ws.lr)
    sft = make_update(policy, sft_objective(run, policy), adam)
    params, sft_first, sft_last = _fit(sft, params, adam.init(params), data.rollout,
                                       data.expert, None, k_sft, steps, ws.batch,
                                       frozen)
    phase_info: Dict[str, float] = {}
    for i, phase in enumerate(phases):
        params, more = phase(run, policy, params, data.rollout, source.env,
                             source.env_params, jax.random.fold_in(key, 5 + i), frozen)
        phase_info.update(more)

    played = jax.jit(rollout, static_argnums=(0, 2, 5, 6))(
        policy, join_params(params, frozen), source.env, source.env_params, k_roll,
        int(ws.episodes), 1)
    params, v_first, v_last = fit_value_head(policy, params, played, adam, k_value, run,
                                             frozen)
    info = {"sft_loss_first": sft_first, "sft_loss_last": sft_last,
            "value_loss_first": v_first, "value_loss_last": v_last,
            "expert_fraction": float(jnp.sum(data.expert) / jnp.sum(data.rollout.turn_mask)),
            **phase_info}
    return params, info

