"""A run's typed config: one frozen record per ConfigDict section, built and checked once.

    run = run_config(config, method)     # at the edge (experiments.harness.registry.check)
    trainer.train(run, method)           # nothing below reads the ConfigDict

Each section's fields carry their allowed values and meaning (`typed_config.option`);
experiments/configs/base.py's get_constraints takes the rules from here
(`constraints(cls, section)` of every pair in SECTIONS) and experiments/harness/
stored_fields.py's ADDED_DEFAULTS the values of the fields added after runs were stored
(`default_of`). A field with a default may be
missing from a config (a config of before it existed); one without must be there.
The method sections (asct, gigpo, vineppo, factor_jax's, ppo's credit fields) are the
methods' own typed configs (Method.make_config), carried as `RunConfig.method_config`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Tuple, Type

from asct_jax.envs import SIZES
from asct_jax.infra.checks import ConfigError, Range, check
from asct_jax.infra.distributed import DistributedConfig, distributed_config
from asct_jax.infra.typed_config import from_section, option
from asct_jax.models.config import LORA_TARGETS, PRESETS
from asct_jax.rl.generation import CHOOSERS, RESTORED_ACTING, THINK
from asct_jax.rl.policy import LABEL_SCORES
from asct_jax.rl.protocol import SUBSTRATE, Protocol, resolve, resolved_section

_AT_LEAST_0 = Range(0, None, integer=True)
_AT_LEAST_1 = Range(1, None, integer=True)
DTYPES = ("float32", "bfloat16")
# train.eval_split: "test", the held-out episodes the tables report (key train.eval_seed,
# env.eval_options as given: every run stored before the field); "validation", episodes no
# reported number uses, for tuning (key train.validation_seed, and an environment with a
# question split plays its VALIDATION_QUESTIONS split: asct_jax.rl.sources.build_env).
EVAL_SPLITS = ("test", "validation")
VALIDATION_QUESTIONS = "val"
VALIDATION_SEED = 20270611   # a fixed key, distinct from experiments/configs/base.py's eval_seed


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvConfig:
    """Section env: the environment a run trains on."""

    name: str = option(None, "a JAX environment (asct_jax.envs.ENVS) or a host game set")
    size: str = option(SIZES, "the environment's preset")
    options: Mapping[str, Any] = option(None, "extra fields of the env's config class",
                                        factory=dict)
    eval_options: Mapping[str, Any] = option(None, "fields replaced for the held-out "
                                             "evaluation only (ragspace: split test)",
                                             factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSetup:
    """Section model: which decoder (a preset from scratch or pretrained weights), its
    shape overrides (0: the preset's), numerics and LoRA."""

    preset: str = option(tuple(PRESETS), "the decoder preset trained from scratch")
    hidden_size: int = option(_AT_LEAST_0, "0: the preset's")
    num_layers: int = option(_AT_LEAST_0, "0: the preset's")
    num_heads: int = option(_AT_LEAST_0, "0: the preset's")
    num_kv_heads: int = option(_AT_LEAST_0, "0: the preset's")
    head_dim: int = option(_AT_LEAST_0, "0: the preset's")
    intermediate_size: int = option(_AT_LEAST_0, "0: the preset's")
    path: str = option(None, "'': the preset; 'smollm2', an HF folder or a .gguf file", "")
    dtype: str = option(DTYPES, "compute and weight dtype", "float32")
    remat: bool = option(None, "rematerialise each block in the backward pass", False)
    attention_block: int = option(_AT_LEAST_0, "> 0: uncached attention in query blocks "
                                  "of this size", 0)
    value_detached: bool = option(None, "the value loss trains the value head alone", False)
    lora_rank: int = option(_AT_LEAST_0, "> 0: only LoRA adapters and the value head train", 0)
    lora_alpha: float = option(Range(0.0, None, lo_open=True), "LoRA scale numerator", 16.0)
    lora_targets: Tuple[str, ...] = option(LORA_TARGETS, "projections given adapters",
                                           LORA_TARGETS)

    # The decoder's shape (asct_jax.models.config.ModelConfig) overridden where non-zero.
    SHAPE = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
             "intermediate_size")

    def shape_overrides(self) -> dict:
        """{shape field: value} of the non-zero shape fields."""
        return {f: getattr(self, f) for f in self.SHAPE if getattr(self, f)}

    def training(self) -> dict:
        """The numerics and LoRA fields, as ModelConfig / load_pretrained take them."""
        return dict(dtype=self.dtype, remat=self.remat, attention_block=self.attention_block,
                    value_detached=self.value_detached, lora_rank=self.lora_rank,
                    lora_alpha=self.lora_alpha, lora_targets=tuple(self.lora_targets))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextConfig:
    """Section text: how a pretrained model sees the environment (model.path set)."""

    system_prompt: str = option(None, "'': the environment's own")
    obs_len: int = option(_AT_LEAST_0, "observation tokens O' (0: measured)")
    action_len: int = option(_AT_LEAST_0, "action tokens A' (0: measured)")
    feedback_len: int = option(_AT_LEAST_0, "feedback tokens F' (0: measured)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    """Section rollout: B = num_groups * group_size episodes a step."""

    num_groups: int = option(_AT_LEAST_1, "groups (tasks) per step")
    group_size: int = option(_AT_LEAST_1, "G episodes per group")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActorConfig:
    """Section actor: how the actor acts (asct_jax.rl.generation)."""

    chooser: str = option(CHOOSERS, "score the legal labels, or write a response",
                          "candidates")
    response_len: int = option(Range(6, None, integer=True), "R: most tokens of a response", 24)
    history: int = option(_AT_LEAST_0, "k past steps in the prompt", 2)
    temperature: float = option(Range(0.0, None, lo_open=True), "sampling temperature", 1.0)
    top_p: float = option(Range(0.0, 1.0, lo_open=True), "nucleus sampling mass", 1.0)
    invalid_penalty: float = option(Range(0.0, None), "subtracted from an invalid step's "
                                    "reward", 0.1)
    continuations: str = option(RESTORED_ACTING, "how pi_old acts at restored states", "chooser")
    think: str = option(THINK, "the think part: both tags required, or none", "required")
    logits_chunk: int = option(_AT_LEAST_0, "most (tokens x vocabulary) logits of the "
                               "update's full-vocabulary passes at once (0: all)", 2 ** 24)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """Section policy: how pi(a | s) scores a legal label."""

    label_score: str = option(LABEL_SCORES, "sum: constrained product; mean: softmax of "
                              "mean token log-probs", "sum")
    prompt_widths: int = option(Range(1, None, integer=True), "static widths the "
                                "undifferentiated prompt passes choose from (models.widths; "
                                "1: every pass on all P columns)", 3)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReturnsConfig:
    """ppo.gamma as the warm start's value targets read it (the credit methods read their
    own fields of section ppo: asct_jax.rl.methods)."""

    gamma: float = option(Range(0.0, 1.0), "discount over turns")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Section train: the loop, evaluation, checkpoints, where the run is written."""

    steps: int = option(_AT_LEAST_1, "training steps")
    eval_every: int = option(_AT_LEAST_1, "held-out evaluation every this many steps")
    eval_episodes: int = option(None, "held-out episodes")
    eval_seed: int = option(None, "key of the held-out episodes (same for every run)")
    eval_split: str = option(EVAL_SPLITS, "which held-out episodes: test (what the tables "
                             "report) or validation (for tuning: key validation_seed, a "
                             "question split's 'val')", "test")
    validation_seed: int = option(None, "key of the validation episodes (eval_split "
                                  "validation; never eval_seed)", VALIDATION_SEED)
    eval_greedy: bool = option(None, "held-out episodes take the argmax")
    checkpoint_every: int = option(_AT_LEAST_1, "checkpoint every this many steps (and "
                                   "the last)")
    keep: int = option(_AT_LEAST_1, "checkpoints kept")
    resume: bool = option(None, "continue from the latest checkpoint")
    num_devices: int = option(None, "0: every device")
    fsdp: int = option(_AT_LEAST_1, "> 1: parameters sharded over a mesh axis of this size", 1)
    results_dir: str = option(None, "root of every run's files")
    experiment: str = option(None, "results/<experiment>/")
    run: str = option(None, "results/<experiment>/<run>/")
    progress: bool = option(None, "show a progress bar")
    batch_seeds: bool = option(None, "table scripts train a variant's seeds as one program")
    compilation_cache: str = option(None, "persistent XLA cache directory ('': off)")
    init_from: str = option(None, "'': fresh; else a warm-start directory", "")
    distributed: DistributedConfig = option(None, "several processes, one program",
                                            DistributedConfig())

    def __post_init__(self):
        if self.eval_split == "validation" and self.validation_seed == self.eval_seed:
            raise ConfigError("train.validation_seed", f"{self.validation_seed} is "
                              "train.eval_seed: validation episodes would be the test ones",
                              "any other int")

    @property
    def held_out_seed(self) -> int:
        """The key of the held-out episodes: eval_seed (test) or validation_seed."""
        return self.validation_seed if self.eval_split == "validation" else self.eval_seed


SFT_STEPS = Range(0, None, integer=True)   # each entry of warm_start.sft_steps
# warm_start.reasoning: what a generating actor's SFT target holds inside its think tags:
# "empty" (every warm start before issue 49), "subgoal" the scripted expert's current
# sub-goal in the environment's words (Environment.expert_rationale; asct_jax.rl.warm_start).
REASONING = ("empty", "subgoal")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarmStartConfig:
    """Section warm_start: SFT on the noisy expert, then the value head
    (asct_jax.rl.warm_start)."""

    seed: int = option(_AT_LEAST_0, "the warm start's key (not a reporting seed)")
    episodes: int = option(_AT_LEAST_1, "noisy-expert (and value-fit) episodes")
    epsilon: float = option(Range(0.0, 1.0), "probability of a uniformly random action")
    sft_steps: Mapping[str, int] = option(None, "SFT steps per environment (SFT_STEPS)")
    value_steps: int = option(_AT_LEAST_0, "value-head steps")
    batch: int = option(_AT_LEAST_1, "turns per update")
    lr: float = option(Range(0.0, 1.0, lo_open=True), "Adam learning rate")
    imitated: str = option(None, "the scripted policy imitated (the environment's "
                           "<name>_policy)", "expert")
    label_smoothing: float = option(
        Range(0.0, 1.0, hi_open=True),
        "SFT target (1 - s) onehot(expert) + s uniform over the legal labels (0: the "
        "expert's action alone)", 0.0)
    # A phase after SFT that a method package supplies and checks (its allowed values and
    # the experiment edge's check are the package's); here because a warm start's name
    # hashes every field of this section.
    phase: str = option(None, "a phase after SFT supplied by a method package ('none': "
                        "off)", "none")
    phase_steps: int = option(_AT_LEAST_0, "updates of that phase", 100)
    reasoning: str = option(REASONING, "a generating actor's SFT think part: empty, or "
                            "the expert's sub-goal in words", "empty")

    def __post_init__(self):
        for env, steps in self.sft_steps.items():
            check(f"warm_start.sft_steps.{env}", steps, SFT_STEPS)


# Every typed section: (record, dotted section). Several records may share a section.
SECTIONS: Tuple[Tuple[Type[Any], str], ...] = (
    (EnvConfig, "env"), (ModelSetup, "model"), (TextConfig, "text"),
    (RolloutConfig, "rollout"), (ActorConfig, "actor"), (PolicyConfig, "policy"),
    (ReturnsConfig, "ppo"), (TrainConfig, "train"),
    (DistributedConfig, "train.distributed"), (WarmStartConfig, "warm_start"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything a run reads. method_config: the typed config (Method.make_config) of
    the method named by `typed_for` (None: built without a method). record: the config as
    given, JSON-compatible: what config.json holds (never read for a value)."""

    seed: int
    method: str
    env: EnvConfig
    model: ModelSetup
    text: TextConfig
    rollout: RolloutConfig
    actor: ActorConfig
    policy: PolicyConfig
    ppo: Protocol
    returns: ReturnsConfig
    train: TrainConfig
    warm_start: WarmStartConfig
    method_config: Any = None
    typed_for: Optional[str] = None
    record: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    def replace(self, **fields: Any) -> "RunConfig":
        """A copy with `fields` replaced (e.g. train=dataclasses.replace(run.train, ...))."""
        return dataclasses.replace(self, **fields)


def run_config(config: Any, method: Optional[Any] = None) -> RunConfig:
    """The RunConfig of a ConfigDict, every section checked (a one-line ConfigError naming
    the field and its allowed values); with `method` (a Method) its typed config too. A
    RunConfig passes through (ValueError if `method` is not the one it was typed for)."""
    if isinstance(config, RunConfig):
        if method is not None and config.typed_for != method.name:
            raise ValueError(f"run_config: a RunConfig typed for {config.typed_for!r} cannot "
                             f"give {method.name!r}'s config; build it from the ConfigDict")
        return config
    from asct_jax.infra.config_cli import config_to_dict

    sec = lambda cls, name, **extra: from_section(cls, config, name, **extra)  # noqa: E731
    train = sec(TrainConfig, "train", distributed=distributed_config(config))
    ppo = resolve(config.ppo, SUBSTRATE if method is None else method.protocol)
    record = config_to_dict(config)
    if isinstance(record.get("ppo"), dict):    # config.json holds the resolved protocol
        record["ppo"] = resolved_section(ppo, record["ppo"])
    return RunConfig(
        seed=config.seed, method=config.method, env=sec(EnvConfig, "env"),
        model=sec(ModelSetup, "model"), text=sec(TextConfig, "text"),
        rollout=sec(RolloutConfig, "rollout"),
        actor=sec(ActorConfig, "actor") if "actor" in config else ActorConfig(),
        policy=sec(PolicyConfig, "policy") if "policy" in config else PolicyConfig(),
        ppo=ppo, returns=sec(ReturnsConfig, "ppo"), train=train,
        warm_start=sec(WarmStartConfig, "warm_start"),
        method_config=None if method is None else method.make_config(config),
        typed_for=None if method is None else method.name, record=record)


def default_of(dotted: str) -> Any:
    """The default of a typed field named by its dotted config path ("actor.chooser")."""
    section, _, name = dotted.rpartition(".")
    for cls, sec in SECTIONS:
        if sec == section:
            for f in dataclasses.fields(cls):
                if f.name == name and f.default is not dataclasses.MISSING:
                    return f.default
    raise KeyError(f"{dotted}: not a typed field with a default")
