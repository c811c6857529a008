"""What fields are to the experiment scripts, in one place (read by
experiments.harness.runner, which reuses a stored run only when its config matches, and by
experiments.harness.warm_start, which names a warm start by a hash of its fields): dotted
names of the base config (experiments/configs/base.py), a section standing for every field
below it.
"""
from __future__ import annotations


# - they do not change what a run computes (a stored run is reused across them);
BOOKKEEPING_FIELDS = ("table", "sweep", "train.experiment", "train.resume", "train.results_dir",
                      "train.progress", "train.compilation_cache", "train.distributed",
                      "warm_start")
# - added after runs were stored; a config.json without one meant its default
#   (asct_jax.rl.run_config: actor.continuations "chooser", what a candidate-mode run did;
#   the few generate-mode runs stored before 2026-12-04 scored their continuations and are
#   taken as current; actor.logits_chunk and model.attention_block change what is alive
#   at once, and the values only in float32 summation order; every run before
#   model.value_detached shared the trunk; policy.prompt_widths only the summation order;
#   every warm start before warm_start.label_smoothing imitated the expert's label alone,
#   its 0, and had no phase after SFT, "none", and wrote an empty think part, warm_start
#   .reasoning "empty"; every run before train.eval_split was
#   evaluated on the test episodes, "test", where train.validation_seed is not read);
ADDED_FIELDS = ("train.init_from", "actor.chooser", "actor.response_len", "actor.history",
                "actor.temperature", "actor.top_p", "actor.invalid_penalty",
                "actor.continuations", "actor.think", "actor.logits_chunk",
                "model.attention_block", "model.value_detached", "policy.prompt_widths",
                "warm_start.label_smoothing", "warm_start.phase",
                "warm_start.phase_steps", "warm_start.reasoning", "train.eval_split",
                "train.validation_seed")


# - and FACTOR's (a method's section: the defaults are factor_jax.methods.FactorConfig's):
#   factor.critic_start "warmup" is what every stored FACTOR run did, and the prefit's
#   counts are not read under it.
ADDED_FACTOR_FIELDS = ("factor.critic_start", "factor.prefit_batches",
                       "factor.prefit_critic_steps")


def _added_defaults() -> dict:
    import dataclasses

    from asct_jax.rl.run_config import default_of
    from factor_jax.methods import FactorConfig

    factor = {f"factor.{f.name}": f.default for f in dataclasses.fields(FactorConfig)}
    return {**{name: default_of(name) for name in ADDED_FIELDS},
            **{name: factor[name] for name in ADDED_FACTOR_FIELDS}}


# Not among them: asct.actor_token_unit (issue 38) changes what a run's summary reports
# (T_aux, J_search: a run stored before it logged word tokens and no ledger) and
# factor.warmup_scaling what FACTOR computes, so runs stored without them run again.
ADDED_DEFAULTS = _added_defaults()
# - retired (issue 35; the code is kept at git tag earlier-variants): a stored run whose
#   retired fields held the value that is what the code now computes reads as one without
#   them (`without_retired`): the earlier ASCT variant's fields under asct.variant "paper"
#   (it ignored them), factor.alloc_tokens "all" and factor.normalise "none"; any other
#   value keeps them and the run differs.
RETIRED_FIELDS = ("asct.variant", "asct.centring", "asct.alpha", "asct.beta_start",
                  "asct.beta_steps", "asct.search")
RETIRED_AT_DEFAULT = {"factor.alloc_tokens": "all", "factor.normalise": "none"}


def without_retired(flat):
    """A stored run's flattened config without the retired fields that changed nothing
    in it (RETIRED_FIELDS under asct.variant "paper" or absent; RETIRED_AT_DEFAULT at
    their value)."""
    out = {k: v for k, v in flat.items() if RETIRED_AT_DEFAULT.get(k, object()) != v}
    if out.get("asct.variant", "paper") != "paper":
        return out
    return {k: v for k, v in out.items()
            if not any(k == p or k.startswith(p + ".") for p in RETIRED_FIELDS)}


# - renamed (issue 50: the substrate names no method's teacher): a stored config's old
#   name reads as the new one (`renamed`); warm starts keep the names that hash the old
#   ones (experiments.harness.warm_start.key).
RENAMED_FIELDS = {"warm_start.teacher": "warm_start.imitated",
                  "warm_start.hindsight": "warm_start.phase",
                  "warm_start.hindsight_steps": "warm_start.phase_steps"}


def renamed(flat: dict) -> dict:
    """A flattened config with RENAMED_FIELDS' old names read as the new ones."""
    return {RENAMED_FIELDS.get(k, k): v for k, v in flat.items()}


def as_current(stored: dict) -> dict:
    """A stored run's config.json (nested) as today's flat config: old names renamed,
    retired fields that changed nothing dropped, added fields at the value they had."""
    from experiments.harness.dotted import flatten

    return {**ADDED_DEFAULTS, **renamed(without_retired(flatten(stored)))}


# - a warm start's parameters depend on them (its directory name hashes them).
WARM_START_FIELDS = ("env", "model", "text", "actor", "warm_start", "ppo.gamma")
