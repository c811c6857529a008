"""The learner protocol: how a method updates the policy around its credit (section `ppo`).

Each author's update differs (how many optimiser steps a batch gets, on what minibatches,
clipped how, with which regularisers), so each `Method` record owns one `Protocol` with
its authors' defaults (asct_jax.rl.credit.Method.protocol), a constant beside the method
record: VERL and ASCT in asct_jax.rl.methods, FACTOR's and its baselines' in factor_jax.
This module keeps the type, the resolution and the substrate's own protocol (SUBSTRATE).
The config's `ppo` fields are overrides: a field left None takes the method's value, a
set one wins, and the run's config.json records the resolved values (`resolve`,
`resolved_section`). The learning rate is the table's (ppo.lr, one per table and model);
a method trains at lr * lr_scale, keeping an author's ratio to its baselines.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from asct_jax.infra.checks import ConfigError, Range
from asct_jax.infra.typed_config import option, option_rule
from asct_jax.rl.losses import AGGREGATIONS

MINIBATCH_UNITS = ("episodes", "steps")
STANDARDISE = ("batch", "none")
QUESTIONS = ("sampled", "walk")
PROTOCOLS = ("method", "substrate")   # ppo.protocol: the base the overrides apply to


@dataclasses.dataclass(frozen=True, kw_only=True)
class Protocol:
    """One method's update: section ppo, resolved (every field but `protocol`). `lr` is
    the table's rate (None in a method's record; the config's); the method trains at
    lr * lr_scale (`method_lr`).

    An update step = `epochs` passes over the batch, each split into minibatches
    (asct_jax.rl.minibatches): minibatch_size 0 -> `minibatches` equal minibatches of
    episodes; > 0, unit episodes -> ceil(B / size) equal minibatches (of at most `size`
    episodes; B must split evenly); unit steps -> minibatches of `size` real turn samples
    (verl-agent's ppo_mini_batch_size: ceil(B * T / size) of them, real samples first, an
    empty one skipped).
    """

    lr: Optional[float] = option(Range(0.0, 1.0, lo_open=True), "the table's learning "
                                 "rate (AdamW)", None)
    epochs: int = option(Range(1, None, integer=True), "passes over the batch per step")
    minibatches: int = option(Range(1, None, integer=True),
                              "minibatches of episodes per pass (minibatch_size 0)")
    minibatch_size: int = option(Range(0, None, integer=True),
                                 "0: `minibatches` equal splits; > 0: this many per minibatch")
    minibatch_unit: str = option(MINIBATCH_UNITS, "what minibatch_size counts: episodes, or "
                                 "real turn samples (steps)")
    clip_eps: float = option(Range(0.0, 1.0, lo_open=True), "PPO ratio clip epsilon")
    dual_clip: float = option(Range(0.0, None), "0: off; c > 1: the loss of a negative "
                              "advantage is at most -c A (verl's clip_ratio_c)")
    lr_scale: float = option(Range(0.0, None, lo_open=True),
                             "the method's lr as a multiple of ppo.lr (the table's rate)")
    warmup_steps: int = option(Range(0, None, integer=True), "linear warm-up, in updates")
    max_grad_norm: float = option(Range(0.0, None, lo_open=True), "global-norm gradient clip")
    weight_decay: float = option(Range(0.0, None), "AdamW weight decay (0: Adam)")
    vf_coef: float = option(Range(0.0, None), "weight of the value loss (0: no critic loss)")
    ent_coef: float = option(None, "weight of the entropy bonus")
    kl_coef: float = option(Range(0.0, None), "weight of the KL to the initial policy")
    kl_clamp: float = option(Range(0.0, None), "the per-token k3 KL clamped to +-this "
                             "(0: not clamped)")
    aggregation: str = option(AGGREGATIONS, "how per-token losses are averaged")
    standardise: str = option(STANDARDISE, "batch: the credit standardised over the step's "
                              "decisions (an ASCT iteration's); none")
    questions: str = option(QUESTIONS, "sampled: each episode's question drawn with "
                            "replacement; walk: through the split without replacement "
                            "(environments with a question split)")
    term_grad_norms: bool = option(None, "log the gradient norm of each loss term apart "
                                   "(one backward pass per term)")

    @property
    def method_lr(self) -> float:
        return self.lr * self.lr_scale

    def minibatch_count(self, batch: int, max_turns: int) -> int:
        """Minibatches per epoch of a batch of `batch` episodes of at most `max_turns`."""
        if self.minibatch_size == 0:
            return self.minibatches
        rows = batch * max_turns if self.minibatch_unit == "steps" else batch
        return -(-rows // self.minibatch_size)


# The recipe every method shared before issue 36 (no author's): ppo.protocol "substrate",
# and PPO with GAE's own.
SUBSTRATE = Protocol(
    epochs=2, minibatches=4, minibatch_size=0, minibatch_unit="episodes", clip_eps=0.2,
    dual_clip=0.0, lr_scale=1.0, warmup_steps=5, max_grad_norm=1.0, weight_decay=0.0,
    vf_coef=0.5, ent_coef=0.01, kl_coef=0.0, kl_clamp=0.0, aggregation="token_mean",
    standardise="none", questions="sampled", term_grad_norms=False)


def protocol_fields() -> Tuple[str, ...]:
    """The fields of section ppo a method's protocol sets (None in the config: its value)."""
    return tuple(f.name for f in dataclasses.fields(Protocol) if f.name != "lr")


def resolve(section: Any, method_protocol: Protocol) -> Protocol:
    """The Protocol of a config's ppo section (a ConfigDict or mapping): the base
    protocol (ppo.protocol: "method" = `method_protocol`, "substrate" = SUBSTRATE) with
    every field the section sets (not None) in its place, each checked (ConfigError naming
    ppo.<field>); lr is required."""
    from asct_jax.infra.checks import check

    def get(name, default=None):   # item access: a field absent from the section is None
        return section[name] if name in section else default

    base = get("protocol", "method")
    check("ppo.protocol", base, PROTOCOLS)
    proto = method_protocol if base == "method" else SUBSTRATE
    given = {}
    for f in dataclasses.fields(Protocol):
        value = get(f.name)
        if value is None:
            continue
        rule = option_rule(f)
        if rule is not None:
            check(f"ppo.{f.name}", value, rule)
        given[f.name] = value
    proto = dataclasses.replace(proto, **given)
    if proto.dual_clip and proto.dual_clip <= 1.0:
        raise ConfigError("ppo.dual_clip", f"{proto.dual_clip!r} must exceed 1", "0 or > 1")
    if proto.lr is None:
        raise ConfigError("ppo.lr", "missing", "a learning rate in (0, 1]")
    return proto


def resolved_section(ppo: Protocol, section: Any) -> dict:
    """The ppo section as config.json records it: every protocol field resolved, the
    section's other fields (the credit methods', e.g. ppo.gamma) as given."""
    return dict(section, **dataclasses.asdict(ppo))
