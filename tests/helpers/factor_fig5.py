"""The tiny factor_fig5 config of the Figure-5 tests (no training: early = late)."""
from experiments.configs import base
from experiments.configs import factor_fig5 as fig5_config


def tiny_config(tmp_path):
    c = base.use_test_model(fig5_config.get_config("quick"))
    c.rollout.num_groups = 2
    c.rollout.group_size = 4
    c.fig5.num_groups = 2
    c.fig5.group_size = 4
    c.fig5.mc_rollouts = 2
    c.fig5.perturb_rollouts = 2
    c.fig5.perturb_actions = 2
    c.fig5.chunk = 64
    c.train.results_dir = str(tmp_path)
    return c
