"""The config of the pretrained-LLM actor tests: a tiny model folder's household run."""
from experiments.configs import base


def llm_config(folder, tmp_path=None, **model):
    c = base.get_config()
    c.model.path = folder
    c.model.update(model)
    c.env.name = "household"
    c.rollout.num_groups, c.rollout.group_size = 2, 2
    c.ppo.minibatches, c.ppo.epochs = 2, 1
    c.vineppo.k = 2
    c.factor.continuations = 1
    c.text.obs_len, c.text.action_len, c.text.feedback_len = 72, 16, 16
    c.train.compilation_cache = ""
    c.train.progress = False
    if tmp_path is not None:
        c.train.results_dir = str(tmp_path)
    return c
