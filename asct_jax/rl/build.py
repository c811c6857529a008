"""What a run is built from: the policy (a preset from scratch or pretrained weights, the
candidate-scoring or the generating actor) and the Learner (mesh, credit, optimiser, the
initial train state placed on the mesh).

    policy, params = build_policy(run, source.vocab_size, source.shape, source.prompt)
    learner = build_learner(run, method, source)

run: an asct_jax.rl.run_config.RunConfig (a ConfigDict is typed on entry, the edge).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from asct_jax.envs.projection import Tags
from asct_jax.envs.prompt import PromptTokens
from asct_jax.envs.tokenizer import TAG_TOKENS, tag_ids
from asct_jax.infra import distributed
from asct_jax.infra.checks import ConfigError
from asct_jax.models import Decoder, get_preset
from asct_jax.models.loading import load_pretrained, resolve_model_path
from asct_jax.rl.actor import make_policy
from asct_jax.rl.credit import CreditContext, Method
from asct_jax.rl.generation import GenerationSpec
from asct_jax.rl.learner import Learner
from asct_jax.rl.params_io import load_params
from asct_jax.rl.policy import Policy
from asct_jax.rl.run_config import RunConfig, run_config
from asct_jax.rl.sources import RolloutSource, TextShape
from asct_jax.rl.train_step import (TrainState, fsdp_shardings, join_params, make_mesh,
                                    make_optimizer, split_params)

# Folded into key(seed) for the method state's initialisation (the steps use 0, 1, ...).
_METHOD_STATE_KEY = 2**31 - 1


def generation_spec(run: RunConfig, shape: TextShape, prompt: PromptTokens = PromptTokens()):
    """The GenerationSpec of run.actor, or None for the candidate-scoring actor: for the
    tiny actor over the environment's words (tags appended after them), for a pretrained
    model in the layout of its chat view (prompt.generation)."""
    run = run_config(run)
    actor = run.actor
    if actor.chooser == "candidates":
        return None
    pieces = prompt.generation
    think = str(actor.think)
    if run.model.path and think != "required":
        raise ConfigError("actor.think", f"{think!r} is for the tiny actor; the pretrained "
                          "actor's instruction (verl-agent's) asks for the think tags",
                          "required")
    if run.model.path and pieces is None:
        raise ConfigError("actor.chooser", "'generate' with a pretrained model (model.path) "
                          "needs a text view that gives its prompt layout; this source has "
                          "none", "candidates")
    if pieces is None:
        tags, stop, pieces = Tags(*((i,) for i in tag_ids(shape.base_vocab_size))), None, None
    else:
        tags, stop = pieces.tags, pieces.stop_id
    extra = {k: v for k, v in (("stop_id", stop), ("pieces", pieces)) if v is not None}
    return GenerationSpec(tags=tags, response_len=int(actor.response_len),
                          history=int(actor.history), temperature=float(actor.temperature),
                          top_p=float(actor.top_p),
                          invalid_penalty=float(actor.invalid_penalty),
                          continuations=str(actor.continuations), think=think,
                          logits_chunk=int(actor.logits_chunk), **extra)


def build_policy(run: RunConfig, vocab_size: int, shape: TextShape,
                 prompt: PromptTokens = PromptTokens()) -> Tuple[Policy, Any]:
    """The decoder and its Policy: the preset (+ run.model's shape overrides) from scratch
    over `vocab_size` tokens, or the pretrained weights of run.model.path.

    Returns (policy, params): params is an nnx.State, or with LoRA (model.lora_rank > 0)
    a tuple (trainable, frozen): the adapters and the new value head, then the base.
    """
    run = run_config(run)
    spec = generation_spec(run, shape, prompt)
    if spec is not None and not run.model.path:   # tags after the env's words
        vocab_size = shape.base_vocab_size + len(TAG_TOKENS)
    training = run.model.training()
    if run.model.path:
        dtype = training.pop("dtype")
        model, _ = load_pretrained(resolve_model_path(run.model.path), dtype,
                                   seed=run.seed, **training)
    else:
        seq = shape.obs_len + shape.feedback_len + shape.action_len + 2
        if spec is not None:
            seq = (spec.prompt_len(shape.obs_len, shape.num_actions, shape.action_len)
                   + shape.feedback_len + spec.response_len + 2)
        training["param_dtype"] = training["dtype"]
        mcfg = get_preset(run.model.preset, vocab_size=vocab_size, max_seq_len=max(seq, 16),
                          **run.model.shape_overrides(), **training)
        model = Decoder(mcfg, rngs=nnx.Rngs(run.seed))
    if model.config.lora_rank:
        trainable = nnx.Any(nnx.LoRAParam, nnx.PathContains("value_head"))
        graphdef, params, frozen = nnx.split(model, trainable, ...)
        params = (params, frozen)
    else:
        graphdef, params = nnx.split(model)
    policy = make_policy(graphdef, model.config.vocab_size, shape, prompt, spec,
                         label_score=run.policy.label_score,
                         prompt_widths=run.policy.prompt_widths)
    return policy, params


def build_learner(run: RunConfig, method: Method, source: RolloutSource,
                  seed_axis: Optional[str] = None) -> Learner:
    """Model, policy, mesh, credit, optimiser and the initial state of a run (method
    state included), placed with fsdp_shardings (replicated unless train.fsdp > 1)
    (seed_axis: the vmapped seed axis when the run is part of a seed batch).
    train.init_from: the params start from that warm start
    (asct_jax.rl.params_io.load_params), the optimiser state is fresh. A ConfigDict is
    typed (and validated, the method's config too) before the model is built."""
    run = run_config(run, method)
    source.check(method)
    policy, params = build_policy(run, source.vocab_size, source.shape, source.prompt)
    params, frozen = split_params(params)
    if run.train.init_from:   # a warm start: its params, fresh optimiser, step 0
        params = load_params(run.train.init_from, params)
    return learner_for_policy(run, method, policy, join_params(params, frozen),
                              source.env, source.env_params, seed_axis)


def learner_for_policy(run: RunConfig, method: Method, policy: Policy, params: Any,
                       env: Any = None, env_params: Any = None,
                       seed_axis: Optional[str] = None) -> Learner:
    """The Learner of a built policy and its parameters (join_params form): mesh, credit,
    auxiliary loss, optimiser and the initial TrainState (method state included) placed
    with fsdp_shardings. env: the JAX-native environment credit methods may restore
    states in (None for host games)."""
    run = run_config(run, method)
    method_cfg, ppo = run.method_config, run.ppo
    params, frozen = split_params(params)
    mesh = make_mesh(run.train.num_devices or None, run.train.fsdp)
    replicated = NamedSharding(mesh, P())
    ctx = CreditContext(policy=policy, env=env, env_params=env_params,
                        group_size=run.rollout.group_size, seed_axis=seed_axis)
    optimizer = make_optimizer(ppo)
    key = jax.random.key(run.seed)
    method_state = (method.init_state(method_cfg, ctx, join_params(params, frozen),
                                      jax.random.fold_in(key, _METHOD_STATE_KEY))
                    if method.stateful else None)
    # Placed up front with the step's in/out shardings: the step compiles once.
    # The KL reference: a copy of the initial params (jnp.copy: never aliased to the
    # donated params), in the state so that every seed of a batch keeps its own.
    ref_params = jax.tree.map(jnp.copy, params) if ppo.kl_coef > 0 else None
    state = TrainState(params=params, opt_state=optimizer.init(params),
                       step=jnp.zeros((), jnp.int32), frozen=frozen,
                       method_state=method_state, ref_params=ref_params)
    sharding = fsdp_shardings(state, mesh)
    return Learner(ppo=ppo, num_groups=run.rollout.num_groups,
                   group_size=run.rollout.group_size, policy=policy, mesh=mesh,
                   method=method, method_config=method_cfg, ctx=ctx,
                   credit_fn=method.make_credit(method_cfg, ctx),
                   aux_loss_fn=method.make_aux_loss(method_cfg, ctx),
                   policy_loss_fn=method.make_policy_loss(method_cfg, ctx),
                   dist_reduce=method.make_dist_reduce(method_cfg, ctx), optimizer=optimizer,
                   init_state=distributed.device_put(state, sharding), state_sharding=sharding,
                   key=distributed.device_put(key, replicated))
