"""Zero-shot evaluation of a pretrained model on the JAX-native analogues
(experiments/studies/zero_shot.py).

    python -m experiments.studies.zero_shot --config experiments/configs/zero_shot.py
    python -m experiments.studies.zero_shot --config experiments/configs/zero_shot.py:quick

The base config with model.path = the shipped SmolLM2-135M-Instruct (no LoRA: nothing
trains), every analogue at size "small" (the tables' size), sampled actions as in the
tables' held-out evaluation.
"""
from experiments.configs import base

ENVS = ("rag_workflow", "household", "shop", "science")


def get_config(arg: str = ""):
    if arg not in ("", "quick"):
        raise ValueError(f"zero_shot config arg must be '' or 'quick', got {arg!r}")
    c = base.get_config()
    c.model.path = "smollm2"
    c.envs = ENVS
    c.train.experiment = "zero_shot"
    c.train.eval_episodes = 16 if arg == "quick" else 64
    return c


def get_constraints():
    cons = base.get_constraints()
    return dict(cons, envs=cons["env.name"])
