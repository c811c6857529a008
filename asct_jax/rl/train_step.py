"""One compiled training step: rollout -> credit -> Optax update, data-parallel.

    state, metrics = train_step(state, key)

* rollout: B = num_groups * G episodes of pi_old (= the current parameters, frozen for the
  whole update), lax.scan over turns; under ppo.questions "walk" the groups walk the
  training split without replacement (asct_jax.envs.questions);
* credit: the registered method maps the batch (and its state) to per-token
  coefficients C [B, T, A] and value targets; the step does not know which method it runs;
* update: the method's protocol (asct_jax.rl.protocol): credit standardised over the
  step's decisions or not, then `epochs` passes over shuffled minibatches of episodes or
  of real turn samples (asct_jax.rl.minibatches; an empty one skipped), nested lax.scan;
  clipped surrogate on C (dual clip optional), value loss, entropy bonus, optional KL to
  the initial policy (its copy in the state); a method may replace the surrogate
  (Method.make_policy_loss), add an auxiliary loss (Method.make_aux_loss) and have the
  pass reduce its next-token distributions for them (Method.make_dist_reduce);
* method state: a stateful method's update_state, after the PPO update (asct_jax.rl.credit);
  a method with a prefit (Method.make_prefit) fits its state once before step 1
  (make_prefit_step; the trainer calls it on a run that starts at step 0).

Every factory takes the learner bundle (asct_jax.rl.learner.Learner).

Data parallelism: jit over a 1-D Mesh with axis "data" (Auto axis type). Parameters and
optimiser state are replicated; the episode axis of every batch array is sharded, so each
device rolls out and differentiates its share and XLA inserts the gradient all-reduce
(the loss is a mean over the global batch: gradients are averaged across devices).
Models that do not fit replicated (train.fsdp > 1): a 2-D Mesh (data, fsdp); every
parameter, optimiser and frozen-base leaf is sharded over "fsdp" by `fsdp_shardings`,
the episode axis over both axes, and XLA gathers the weights where the step needs them.
Several hosts: join the processes first (`jax.distributed.initialize()`, from the config:
asct_jax.infra.distributed); the mesh then spans every device of every host and the same
step runs unchanged.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from asct_jax.envs.questions import evaluation_question_ids, step_question_ids
from asct_jax.infra.checks import ConfigError
from asct_jax.rl import advantages as adv
from asct_jax.rl import losses
from asct_jax.rl import minibatches as mbs
from asct_jax.rl.credit import StateInputs
from asct_jax.rl.learner import Learner
from asct_jax.rl.protocol import Protocol
from asct_jax.rl.rollout import episode_metrics, rollout
from asct_jax.rl.types import Credit, Rollout, policy_inputs
from asct_jax.rl.types import merge_batch_turns as _flat

DATA_AXIS = "data"
FSDP_AXIS = "fsdp"   # parameters sharded over it (train.fsdp > 1); the batch too
SEED_AXIS = "seed"   # the vmapped axis of make_seeds_train_step (CreditContext.seed_axis)
# Folded into the run's key for the prefit (the steps fold in 0, 1, ...; the method
# state's initialisation 2**31 - 1, asct_jax.rl.build).
PREFIT_KEY = 2**31 - 2


@chex.dataclass
class TrainState:
    """params: what the optimiser trains (all decoder weights, or with LoRA the adapters
    and the value head); frozen: the rest of the decoder (LoRA's base weights, None
    without LoRA), an argument of every step but never updated or checkpointed;
    method_state: the credit method's own state (None for stateless methods),
    checkpointed, stacked per seed and sharded like the parameters; ref_params: the KL
    reference (the initial params; None unless ppo.kl_coef > 0), never updated."""

    params: Any
    opt_state: Any
    step: chex.Array  # [] int32
    frozen: Any = None
    method_state: Any = None
    ref_params: Any = None


def join_params(params: Any, frozen: Any) -> Any:
    """What the policy reads (asct_jax.rl.policy.Policy.merge): params, or (params, frozen)."""
    return params if frozen is None else (params, frozen)


def split_params(params: Any):
    """The inverse of join_params: (params, frozen or None)."""
    return params if isinstance(params, tuple) else (params, None)


def policy_params(state: TrainState) -> Any:
    return join_params(state.params, state.frozen)


# vmap axes of a seed batch: per-seed params, optimiser state, step and method state;
# one shared base.
SEED_STATE_AXES = TrainState(params=0, opt_state=0, step=0, frozen=None, method_state=0,
                             ref_params=0)


def make_mesh(num_devices: Optional[int] = None, fsdp: int = 1) -> Mesh:
    """The mesh over the first `num_devices` devices (all by default): 1-D ("data",) for
    fsdp = 1, else 2-D ("data", "fsdp") with data = devices / fsdp (Auto axis types)."""
    devices = jax.devices()[: num_devices or jax.device_count()]
    n = len(devices)
    if fsdp == 1:
        return jax.make_mesh((n,), (DATA_AXIS,), devices=devices,
                             axis_types=(jax.sharding.AxisType.Auto,))
    if not isinstance(fsdp, int) or fsdp < 1 or n % fsdp:
        allowed = ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
        raise ConfigError("train.fsdp", f"{fsdp!r} does not divide the {n} devices "
                          "(train.num_devices)", allowed)
    return jax.make_mesh((n // fsdp, fsdp), (DATA_AXIS, FSDP_AXIS), devices=devices,
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)


def batch_axes(mesh: Mesh):
    """The mesh axes the episode axis of a batch is sharded over: all of them, so every
    device rolls out and differentiates its share ("data", or ("data", "fsdp"))."""
    names = tuple(mesh.axis_names)
    return names[0] if len(names) == 1 else names


def fsdp_shardings(tree: Any, mesh: Mesh) -> Any:
    """One NamedSharding per leaf of `tree` (params, optimiser state, a TrainState): the
    FSDP sharding rule, in one place.

    A leaf with a dimension divisible by the mesh's "fsdp" size is sharded over "fsdp"
    along its largest such dimension (the first of equals); every other leaf (scalars,
    small or indivisible shapes), and every leaf of a mesh without an "fsdp" axis, is
    replicated. Only shapes are read, so `tree` may hold arrays or ShapeDtypeStructs.
    """
    size = dict(mesh.shape).get(FSDP_AXIS, 1)

    def rule(x):
        shape = tuple(getattr(x, "shape", ()))
        dims = [d for d, n in enumerate(shape) if size > 1 and n >= size and n % size == 0]
        if not dims:
            return NamedSharding(mesh, P())
        dim = max(dims, key=lambda d: shape[d])
        return NamedSharding(mesh, P(*[FSDP_AXIS if d == dim else None
                                       for d in range(len(shape))]))
    return jax.tree.map(rule, tree)


def make_optimizer(cfg: Protocol) -> optax.GradientTransformation:
    """AdamW at the method's rate (ppo.lr x lr_scale; weight decay 0 = Adam) with
    global-norm clipping and an optional linear warm-up (in optimiser updates)."""
    lr = cfg.method_lr
    warmup = max(int(cfg.warmup_steps), 1)  # the first update is not at lr 0
    schedule = optax.linear_schedule(lr / warmup, lr, warmup)
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm),
                       optax.adamw(schedule, b1=0.9, b2=0.999, weight_decay=cfg.weight_decay))


def check_minibatches(ppo: Protocol, batch: int, mesh: Mesh) -> None:
    """ValueError (naming the fields) unless the batch splits as the protocol says."""
    n_dev = mesh.devices.size
    if ppo.minibatch_unit == "steps" and ppo.minibatch_size:
        if ppo.minibatch_size % n_dev or batch % n_dev:
            raise ValueError(f"ppo.minibatch_size = {ppo.minibatch_size} (step samples) and "
                             f"the batch {batch} must be divisible by the {n_dev} devices")
        return
    count = ppo.minibatch_count(batch, 1)
    if batch % (n_dev * count):
        field = ("ppo.minibatch_size" if ppo.minibatch_size else "ppo.minibatches")
        raise ValueError(
            f"rollout: num_groups * group_size = {batch} must be divisible by devices x "
            f"minibatches = {n_dev} x {count} ({field})")


def credit_abs_mean(coef, token_mask):
    """mean |C_{t,j}| over the trained tokens (the credit's scale)."""
    m = token_mask.astype(jnp.float32)
    return jnp.sum(jnp.abs(coef) * m) / jnp.maximum(jnp.sum(m), 1.0)


def _learn_fn(learner: Learner) -> Callable:
    """learn(state, data, key) -> (state, metrics): credit, the protocol's update, then
    the method's state update (pure)."""
    ppo, policy, mesh, optimizer = learner.ppo, learner.policy, learner.mesh, learner.optimizer
    credit_fn, aux_loss_fn = learner.credit_fn, learner.aux_loss_fn
    policy_loss_fn, dist_reduce = learner.policy_loss_fn, learner.dist_reduce
    method, method_cfg, ctx = learner.method, learner.method_config, learner.ctx
    episode_sharding = NamedSharding(mesh, P(batch_axes(mesh)))
    mb_sharding = NamedSharding(mesh, P(None, batch_axes(mesh)))

    def shard_episodes(tree, sharding):
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding)
                            if x.ndim >= 1 else x, tree)

    def loss_terms(params, frozen, ref, mb: Rollout, credit: Credit):
        """({term: weighted loss}, metrics, {policy part: loss}); the loss is the sum of
        the terms. A policy-loss plug-in that returns its loss as parts ({part: loss},
        FACTOR's act / nonact) has them summed into the policy term."""
        b, t = mb.turn_mask.shape
        reduce = (None if dist_reduce is None else
                  (dist_reduce.fn, jax.tree.map(_flat, dist_reduce.inputs(credit))))
        out = policy.action_outputs(
            join_params(params, frozen), _flat(policy_inputs(mb)), _flat(mb.responses),
            _flat(mb.cand_tokens), _flat(mb.cand_mask), dist_reduce=reduce)
        out = jax.tree.map(lambda x: x.reshape((b, t) + x.shape[1:]), out)
        if policy_loss_fn is None:
            pl, m = losses.policy_loss(out.logp, mb.logp_old, credit.coef, mb.token_mask,
                                       ppo.clip_eps, ppo.aggregation, ppo.dual_clip)
        else:
            pl, m = policy_loss_fn(out, mb, credit, ppo)
        parts = pl if isinstance(pl, dict) else {}
        if parts:
            pl = sum(parts.values())
        vl = losses.value_loss(out.value, credit.value_targets, mb.turn_mask)
        entropy = losses.entropy_bonus(out.entropy, mb.token_mask, ppo.aggregation)
        terms = {"policy": pl, "value": ppo.vf_coef * vl, "entropy": -ppo.ent_coef * entropy}
        m = dict(m, policy_loss=pl, value_loss=vl, entropy=entropy)
        if ppo.kl_coef > 0.0:
            # With LoRA the reference is the initial adapters (B = 0) on the frozen base.
            ref_logp, _, _ = policy.action_log_probs(
                join_params(ref, frozen), _flat(policy_inputs(mb)), _flat(mb.responses),
                _flat(mb.cand_tokens), _flat(mb.cand_mask))
            kl = losses.kl_penalty(out.logp, jax.lax.stop_gradient(ref_logp.reshape(b, t, -1)),
                                   mb.token_mask, ppo.aggregation, ppo.kl_clamp)
            terms["kl_ref"] = ppo.kl_coef * kl
            m["kl_ref"] = kl
        if aux_loss_fn is not None:
            aux, aux_m = aux_loss_fn(out, mb, credit)
            terms["aux"] = aux
            m.update(aux_m)
        return terms, m, parts

    def loss_fn(params, frozen, ref, mb, credit):
        terms, m, _ = loss_terms(params, frozen, ref, mb, credit)
        total = sum(terms.values())
        return total, dict(m, loss=total)

    def term_grad_norms(params, frozen, ref, mb, credit):
        """{grad_norm/<term>: ||d term / d params||}: one backward pass per term, and per
        part of a policy loss given in parts (grad_norm/policy_<part>)."""
        def each(p):
            terms, _, parts = loss_terms(p, frozen, ref, mb, credit)
            return dict(terms, **{f"policy_{k}": v for k, v in parts.items()})
        grads = jax.jacrev(each)(params)
        return {f"grad_norm/{k}": optax.tree.norm(g) for k, g in grads.items()}

    def update(params, opt_state, frozen, ref, data, credit, key):
        """`epochs` passes of shuffled minibatch updates (nested lax.scan; the frozen base
        and the reference are loop invariants); an empty minibatch (unit steps) is
        skipped."""
        batch, turns = data.turn_mask.shape
        by_steps = ppo.minibatch_unit == "steps" and ppo.minibatch_size > 0
        if by_steps:
            data, credit = mbs.to_turn_rows((data, credit), batch, turns)

        def update_minibatch(carry, mb):
            params, opt_state = carry
            data, credit = (shard_episodes(x, episode_sharding) for x in mb)
            (_, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                params, frozen, ref, data, credit)
            m = dict(m, grad_norm=optax.tree.norm(grads))
            if ppo.term_grad_norms:
                m.update(term_grad_norms(params, frozen, ref, data, credit))
            updates, new_opt = optimizer.update(grads, opt_state, params)
            live = mbs.has_real_turns(data.turn_mask)
            params, opt_state = jax.tree.map(lambda a, b: jnp.where(live, a, b),
                                             (optax.apply_updates(params, updates), new_opt),
                                             (params, opt_state))
            return (params, opt_state), dict(m, updates=live.astype(jnp.float32))

        def update_epoch(carry, key):
            if by_steps:
                split = mbs.split_turn_rows((data, credit), key,
                                            data.turn_mask.reshape(batch, turns),
                                            ppo.minibatch_size)
            else:
                split = mbs.split_episodes((data, credit), key,
                                           ppo.minibatch_count(batch, turns), batch)
            split = jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, mb_sharding)
                                 if x.ndim >= 2 else x, split)
            return jax.lax.scan(update_minibatch, carry, split)

        return jax.lax.scan(update_epoch, (params, opt_state),
                            jax.random.split(key, ppo.epochs))

    def learn(state: TrainState, data: Rollout, key: chex.PRNGKey):
        k_credit, k_update = jax.random.split(key)
        data = shard_episodes(data, episode_sharding)
        behaviour = policy_params(state)
        credit = credit_fn(behaviour, data, k_credit, state.step, state.method_state)
        # The episode arrays only: a method state in the credit keeps its own sharding.
        credit = shard_episodes(credit.replace(state=None), episode_sharding).replace(
            state=credit.state)
        raw_abs = credit_abs_mean(credit.coef, data.token_mask)
        if ppo.standardise == "batch":
            credit = credit.replace(coef=adv.standardise_coefficients(
                credit.coef, data.turn_mask, data.token_mask))
        # The update needs the per-episode arrays only: drop states, scalars and infos.
        shuffled = data.replace(states=None, final_info={}, env_calls=None, extras=None,
                                turn_info=None)
        (params, opt_state), m = update(state.params, state.opt_state, state.frozen,
                                        state.ref_params, shuffled,
                                        credit.replace(metrics={}, state=None), k_update)
        made = m.pop("updates")                       # [epochs, M]: 1 where an update ran
        n_made = jnp.sum(made)
        # Means over the updates made (a skipped minibatch left out).
        metrics: Dict[str, Any] = {
            f"train/{k}": jnp.sum(jnp.where(made > 0, v, 0.0)) / jnp.maximum(n_made, 1.0)
            for k, v in m.items()}
        metrics["train/updates"] = n_made             # optimiser updates this step
        metrics.update({f"rollout/{k}": v for k, v in episode_metrics(data).items()})
        metrics.update({f"credit/{k}": v for k, v in credit.metrics.items()})
        metrics["rollout/env_calls"] = data.env_calls.astype(jnp.float32)
        metrics["credit/coef_abs_mean"] = credit_abs_mean(credit.coef, data.token_mask)
        metrics["credit/coef_abs_mean_raw"] = raw_abs    # before ppo.standardise
        method_state = state.method_state
        if method.stateful:
            # Its own key: the credit's and the update's stay those of a stateless method.
            inputs = StateInputs(params=join_params(params, state.frozen),
                                 behaviour_params=behaviour, batch=data, credit=credit,
                                 key=jax.random.fold_in(k_update, 1), step=state.step)
            method_state, state_m = method.update_state(method_cfg, ctx, method_state, inputs)
            metrics.update({f"method/{k}": v for k, v in state_m.items()})
        new_state = state.replace(params=params, opt_state=opt_state, step=state.step + 1,
                                  method_state=method_state)
        return new_state, metrics

    return learn


def make_learn_step(learner: Learner) -> Callable:
    """Jitted learn(state, data, key): credit + update on a batch collected elsewhere
    (host-side rollouts of the real games, benchmarks), with the learner's state
    shardings in and out."""
    check_minibatches(learner.ppo, learner.batch_size, learner.mesh)
    replicated = NamedSharding(learner.mesh, P())
    sharding = learner.state_sharding
    # in_shardings None: taken from the argument (the batch, the key).
    return jax.jit(_learn_fn(learner), in_shardings=(sharding, None, None),
                   out_shardings=(replicated if sharding is None else sharding, replicated))


def train_step_fn(learner: Learner, env, env_params) -> Callable:
    """The pure step(state, key): rollout -> credit -> update (make_train_step jits it,
    make_seeds_train_step vmaps it over seeds first)."""
    check_minibatches(learner.ppo, learner.batch_size, learner.mesh)
    learn = _learn_fn(learner)
    policy, num_groups, group_size = learner.policy, learner.num_groups, learner.group_size

    walk = learner.ppo.questions == "walk"

    def step(state: TrainState, key: chex.PRNGKey):
        k_roll, k_learn = jax.random.split(jax.random.fold_in(key, state.step))
        # ppo.questions "walk": the step's groups walk the training split without
        # replacement (None for an environment without a question split).
        qids = (step_question_ids(env, env_params, key, state.step, num_groups)
                if walk else None)
        data = rollout(policy, policy_params(state), env, env_params, k_roll, num_groups,
                       group_size, question_ids=qids)
        return learn(state, data, k_learn)
    return step


def make_train_step(learner: Learner, env, env_params) -> Callable:
    """Builds the jitted step(state, key): rollout -> credit -> update, compiled once,
    with the learner's state shardings in and out (replicated if None)."""
    step = train_step_fn(learner, env, env_params)
    replicated = NamedSharding(learner.mesh, P())
    sharding = replicated if learner.state_sharding is None else learner.state_sharding
    return jax.jit(step, in_shardings=(sharding, replicated),
                   out_shardings=(sharding, replicated), donate_argnums=(0,))


def make_seeds_train_step(learner: Learner, env, env_params,
                          state_sharding: Any = None) -> Callable:
    """step(states, keys) for S seeds as one program: every leaf of `states` and `keys`
    has a leading seed axis [S, ...] (vmap, as PureJaxRL trains seeds together); the
    metrics come back as [S] arrays (each seed's KL reference is its own). The
    learner's credit must be built with CreditContext.seed_axis = SEED_AXIS.
    state_sharding: the stacked state's shardings (fsdp_shardings; None: replicated)."""
    step = train_step_fn(learner, env, env_params)
    replicated = NamedSharding(learner.mesh, P())
    state_sharding = replicated if state_sharding is None else state_sharding
    seeds_step = jax.vmap(step, in_axes=(SEED_STATE_AXES, 0),
                          out_axes=(SEED_STATE_AXES, 0), axis_name=SEED_AXIS)
    return jax.jit(seeds_step, in_shardings=(state_sharding, replicated),
                   out_shardings=(state_sharding, replicated), donate_argnums=(0,))


def prefit_fn(learner: Learner, env, env_params) -> Optional[Callable]:
    """The pure prefit(state, key) -> (state, {"prefit/<name>": []}) of a method with one
    (Method.make_prefit), else None: its state fitted on training batches of the state's
    policy (the rollout of the train step, fresh questions); the params, optimiser state
    and step are untouched. key: the run's key (fold_in PREFIT_KEY)."""
    fit = learner.method.make_prefit(learner.method_config, learner.ctx)
    if fit is None:
        return None
    policy, num_groups, group_size = learner.policy, learner.num_groups, learner.group_size

    def collect(params, key):
        return rollout(policy, params, env, env_params, key, num_groups, group_size)

    def prefit(state: TrainState, key: chex.PRNGKey):
        mstate, m = fit(policy_params(state), state.method_state,
                        jax.random.fold_in(key, PREFIT_KEY), collect)
        return state.replace(method_state=mstate), {f"prefit/{k}": v for k, v in m.items()}
    return prefit


def make_prefit_step(learner: Learner, env, env_params, seeds: bool = False,
                     state_sharding: Any = None) -> Optional[Callable]:
    """Jitted prefit(state, key) (prefit_fn), None for a method without one; seeds: over a
    seed batch's stacked state and keys (vmapped as make_seeds_train_step, metrics [S]).
    state_sharding: the state's shardings (None: the learner's, else replicated)."""
    fn = prefit_fn(learner, env, env_params)
    if fn is None:
        return None
    if seeds:
        fn = jax.vmap(fn, in_axes=(SEED_STATE_AXES, 0), out_axes=(SEED_STATE_AXES, 0),
                      axis_name=SEED_AXIS)
    replicated = NamedSharding(learner.mesh, P())
    sharding = state_sharding if state_sharding is not None else learner.state_sharding
    sharding = replicated if sharding is None else sharding
    return jax.jit(fn, in_shardings=(sharding, replicated),
                   out_shardings=(sharding, replicated), donate_argnums=(0,))


def make_eval(policy, env, env_params, num_episodes: int, mesh: Mesh,
              greedy: bool = True, seeds: bool = False, state_sharding: Any = None) -> Callable:
    """Jitted held-out evaluation: `num_episodes` fresh episodes (group size 1); on an
    environment with a question split, each of the split's first `num_episodes` questions
    once (asct_jax.envs.questions.evaluation_question_ids).

    evaluate(params, frozen, key): `frozen` is the shared base (None without LoRA).
    seeds=True: params carry a leading seed axis [S, ...] and the metrics are [S]; every
    seed plays the same episodes (the key is shared). state_sharding: the TrainState
    shardings whose .params and .frozen the arguments have (None: replicated).
    """
    replicated = NamedSharding(mesh, P())
    params_sh, frozen_sh = ((replicated, replicated) if state_sharding is None
                            else (state_sharding.params, state_sharding.frozen))

    # An environment with a question split plays each of the split's first num_episodes
    # questions once (every test question at the paper's scale), else num_episodes draws.
    qids = evaluation_question_ids(env, env_params, num_episodes)
    episodes = num_episodes if qids is None else int(qids.shape[0])

    def evaluate(params, frozen, key):
        data = rollout(policy, join_params(params, frozen), env, env_params, key,
                       episodes, 1, greedy=greedy, question_ids=qids)
        return episode_metrics(data)

    fn = jax.vmap(evaluate, in_axes=(0, None, None)) if seeds else evaluate
    return jax.jit(fn, in_shardings=(params_sh, frozen_sh, replicated),
                   out_shardings=replicated)


def to_host(metrics: Dict[str, Any]) -> Dict[str, float]:
    return {k: float(np.asarray(v)) for k, v in metrics.items()}


def to_host_seeds(metrics: Dict[str, Any], num_seeds: int) -> List[Dict[str, float]]:
    """[S]-valued metrics of a seed batch -> one host dict per seed."""
    host = {k: np.asarray(v) for k, v in jax.device_get(metrics).items()}
    return [{k: float(v[i]) for k, v in host.items()} for i in range(num_seeds)]
