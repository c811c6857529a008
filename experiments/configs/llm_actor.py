"""The pretrained LLM actor on one analogue: SmolLM2-135M-Instruct with LoRA (CPU scale).

    python -m experiments.train --config experiments/configs/llm_actor.py --config.method=grpo
    python -m experiments.train --config experiments/configs/llm_actor.py --config.method=factor
    python -m experiments.train --config experiments/configs/llm_actor.py:gpu \
        --config.model.path=/path/to/Qwen2.5-1.5B-Instruct --config.method=factor

The base config with model.path = the shipped SmolLM2 weights, LoRA rank 8 on every
projection (only the adapters and the value head train; the frozen base is the KL
reference), rematerialised blocks. `cpu` (default): 2 groups x 4 episodes per step on
household, 12 steps, what finishes in about an hour on 2 cores. `gpu`: the recipe for
one accelerator (docs/results/llm_actor.md): bfloat16, the table's 8 x 8 episodes.
The learning rate 2e-4 is the common LoRA default, not tuned here.
"""
from experiments.configs import base


def get_config(arg: str = "cpu"):
    if arg not in ("cpu", "gpu"):
        raise ValueError(f"llm_actor config arg must be 'cpu' or 'gpu', got {arg!r}")
    c = base.get_config()
    c.method = "grpo"
    c.env.name = "household"
    c.model.path = "smollm2"
    c.model.lora_rank = 8
    c.model.lora_alpha = 16.0
    c.model.remat = True
    c.model.attention_block = 128
    c.ppo.lr = 2e-4
    c.train.experiment = "llm_actor"
    c.train.batch_seeds = False
    if arg == "cpu":
        c.rollout.num_groups, c.rollout.group_size = 2, 4
        c.train.steps = 12
        c.train.eval_every = 6
        c.train.eval_episodes = 32
        c.train.checkpoint_every = 3
    else:
        c.model.dtype = "bfloat16"
        c.rollout.num_groups, c.rollout.group_size = 8, 8
        c.train.steps = 60
        c.train.eval_episodes = 256
    return c


def get_constraints():
    return base.get_constraints()
