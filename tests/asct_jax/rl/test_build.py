"""Building a run (asct_jax.rl.build): the policy of the model section (shape overrides,
LoRA's trainable / frozen split, the label score) and the generating actor's spec, whose
impossible settings are one-line config errors."""
import pytest

from asct_jax.infra.checks import ConfigError
from asct_jax.rl.build import build_policy, generation_spec
from asct_jax.rl.sources import TextShape
from experiments.configs import base


def test_the_policy_follows_the_model_and_policy_sections():
    c = base.use_test_model(base.get_config())
    c.policy.label_score = "mean"
    policy, params = build_policy(c, 50, TextShape(8, 4, 4))
    assert policy.label_score == "mean" and policy.vocab_size == 50
    assert params["embed_tokens"]["embedding"].value.shape == (50, 32)   # hidden_size 32
    c.model.lora_rank = 2
    _, (trainable, frozen) = build_policy(c, 50, TextShape(8, 4, 4))
    assert "value_head" in trainable and "embed_tokens" in frozen
    assert "embed_tokens" not in trainable


def test_the_candidate_actor_has_no_generation_spec():
    assert generation_spec(base.get_config(), TextShape(8, 4, 4, 3, 100)) is None


def test_the_pretrained_actor_without_think_is_a_config_error():
    c = base.get_config()
    c.actor.chooser, c.actor.think = "generate", "none"
    c.model.path = "some/model"
    with pytest.raises(ConfigError, match=r"^actor.think: .*allowed: required$"):
        generation_spec(c, TextShape(8, 4, 4, 3, 100))


def test_the_generating_pretrained_actor_without_a_chat_view_is_a_config_error():
    c = base.get_config()
    c.actor.chooser = "generate"
    c.model.path = "some/model"
    with pytest.raises(ConfigError, match=r"^actor.chooser: "):
        generation_spec(c, TextShape(8, 4, 4, 3, 100))
