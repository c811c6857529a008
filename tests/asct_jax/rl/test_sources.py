"""The JAX-native rollout source (asct_jax.rl.sources): its shapes come from the
environment of the env section, its held-out environment is the same one unless
env.eval_options replaces fields (ragspace's test split)."""
import ml_collections

from asct_jax.rl.sources import JaxEnvSource, TextShape, held_out_env
from experiments.configs import base


def test_the_source_is_the_env_sections_environment():
    c = base.get_config()
    c.env.name = "shop"
    source = JaxEnvSource(c)
    env = source.env
    assert source.shape == TextShape(env.obs_len, env.action_len, env.feedback_len,
                                     env.num_actions, len(env.tokenizer))
    assert source.vocab_size == len(env.tokenizer) and source.prompt.generation is None
    assert held_out_env(c, source) == (source.env, source.env_params)
    assert source.summary_extra() == {"env": "shop", "eval_split": "test",
                                      "eval_key_seed": c.train.eval_seed}


def test_the_held_out_environment_takes_the_eval_options():
    c = base.get_config()
    c.env.name = "ragspace"
    c.env.eval_options = ml_collections.ConfigDict({"split": "test"})
    source = JaxEnvSource(c)
    env, env_params = held_out_env(c, source)
    assert (source.env_params.split, env_params.split) == ("train", "test")
