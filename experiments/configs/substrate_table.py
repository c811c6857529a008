"""PPO and GRPO on every small JAX environment: does the substrate learn?

    python -m experiments.tables.substrate_table --config experiments/configs/substrate_table.py
"""
import ml_collections

from experiments.configs import base


def get_config():
    c = base.get_config()
    c.train.experiment = "substrate_table"
    c.train.steps = 30
    c.train.eval_every = 30
    c.train.eval_episodes = 256
    c.table = ml_collections.ConfigDict()
    c.table.methods = ("ppo_gae", "grpo")
    c.table.envs = ("rag_workflow", "household", "shop", "science")
    c.table.seeds = (42, 43, 1337)
    return c


def get_constraints():
    cons = base.get_constraints()
    return dict(cons, **{"table.methods": cons["method"], "table.envs": cons["env.name"]})
