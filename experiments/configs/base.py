"""Base config: the `tiny` policy trained with one credit method on one JAX environment.

    python -m experiments.train --config experiments/configs/base.py \
        --config.method=grpo --config.env.name=household --config.seed=43
"""
import ml_collections

from asct_jax.rl.config_cli import Range

METHODS = ("ppo_return", "ppo_gae", "grpo", "vineppo", "asct_uniform", "asct_uct",
           "asct_agentuct", "factor", "factor_no_tac", "factor_no_hta", "factor_no_apm",
           "serl", "grpo_extended", "asct_factor")
ENVS = ("rag_workflow", "household", "shop", "science", "toy_tree")


def get_config():
    c = ml_collections.ConfigDict()
    c.seed = 42
    c.method = "grpo"

    c.env = ml_collections.ConfigDict()
    c.env.name = "household"
    c.env.size = "small"
    c.env.options = ml_collections.ConfigDict()  # extra fields of the env's config class

    c.model = ml_collections.ConfigDict()
    c.model.preset = "tiny"
    c.model.hidden_size = 64
    c.model.num_layers = 2
    c.model.num_heads = 4
    c.model.num_kv_heads = 2
    c.model.head_dim = 16
    c.model.intermediate_size = 192

    c.rollout = ml_collections.ConfigDict()
    c.rollout.num_groups = 8
    c.rollout.group_size = 8

    c.ppo = ml_collections.ConfigDict()
    c.ppo.epochs = 2
    c.ppo.minibatches = 2
    c.ppo.clip_eps = 0.2
    c.ppo.lr = 1e-3
    c.ppo.warmup_steps = 5
    c.ppo.max_grad_norm = 1.0
    c.ppo.weight_decay = 0.0
    c.ppo.vf_coef = 0.5
    c.ppo.ent_coef = 0.01
    c.ppo.kl_coef = 0.0
    c.ppo.aggregation = "token_mean"
    c.ppo.gamma = 1.0
    c.ppo.gae_lambda = 0.95
    c.ppo.return_baseline = "critic"

    c.train = ml_collections.ConfigDict()
    c.train.steps = 60
    c.train.eval_every = 20
    c.train.eval_episodes = 256
    c.train.eval_seed = 20261129
    c.train.checkpoint_every = 20
    c.train.keep = 2
    c.train.resume = False
    c.train.num_devices = 0  # 0: every device
    c.train.results_dir = "results"
    c.train.experiment = "train"
    c.train.run = "run"
    c.train.progress = True
    return c


def get_constraints():
    return {
        "method": METHODS,
        "env.name": ENVS,
        "env.size": ("small", "hard"),
        "model.preset": ("tiny", "smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"),
        "ppo.aggregation": ("token_mean", "sequence_mean", "action_mean"),
        "ppo.return_baseline": ("critic", "none"),
        "ppo.clip_eps": Range(0.0, 1.0, lo_open=True),
        "ppo.lr": Range(0.0, 1.0, lo_open=True),
        "ppo.epochs": Range(1, None, integer=True),
        "ppo.minibatches": Range(1, None, integer=True),
        "rollout.num_groups": Range(1, None, integer=True),
        "rollout.group_size": Range(1, None, integer=True),
        "train.steps": Range(1, None, integer=True),
        "train.eval_every": Range(1, None, integer=True),
        "train.checkpoint_every": Range(1, None, integer=True),
        "train.keep": Range(1, None, integer=True),
    }
