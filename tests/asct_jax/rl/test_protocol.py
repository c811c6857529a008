"""The learner protocols (asct_jax.rl.protocol; each constant beside its method record):
each method's authors' update, resolved from the config's ppo section."""
import dataclasses

import pytest

from asct_jax.infra.checks import ConfigError
from asct_jax.rl import protocol as P
from asct_jax.rl.methods import ASCT, VERL
from factor_jax.baselines import SERL_PROTOCOL as SERL
from factor_jax.methods import FACTOR_PROTOCOL as FACTOR
from experiments.configs import base
from experiments.harness import registry


def test_each_method_owns_its_authors_protocol():
    expect = {"grpo": VERL, "gigpo": VERL, "grpo_extended": VERL, "serl": SERL,
              "factor": FACTOR, "factor_no_tac": FACTOR, "factor_no_hta": FACTOR,
              "factor_no_apm": FACTOR, "ppo_return": ASCT, "vineppo": ASCT,
              "asct_uniform": ASCT, "asct_uct": ASCT, "asct_agentuct": ASCT,
              "asct_actor_rollout": ASCT, "asct_factor": ASCT, "ppo_gae": P.SUBSTRATE}
    assert set(expect) == set(registry.names())
    for name, proto in expect.items():
        assert registry.get(name).protocol == proto, name


def test_the_authors_settings():
    # verl-agent: 1 epoch, 256 step samples, dual clip 3, entropy 0.001, KL 0.01 clamped 10.
    v = VERL
    assert (v.epochs, v.minibatch_size, v.minibatch_unit, v.dual_clip, v.ent_coef,
            v.kl_coef, v.kl_clamp, v.weight_decay, v.vf_coef) == (
                1, 256, "steps", 3.0, 0.001, 0.01, 10.0, 0.01, 0.0)
    assert SERL.kl_coef == 0.0 and SERL.dual_clip == 3.0
    # FACTOR: one Adam step on the whole batch, no entropy / value loss, lr 5e-7 vs 1e-6.
    f = FACTOR
    assert (f.epochs, f.minibatch_count(64, 15), f.ent_coef, f.vf_coef, f.weight_decay,
            f.lr_scale) == (1, 1, 0.0, 0.0, 0.0, 0.5)
    # ASCT: 2 epochs of minibatch 8 over the iteration, standardised, no critic / entropy.
    a = ASCT
    assert (a.epochs, a.minibatch_size, a.minibatch_unit, a.standardise, a.vf_coef,
            a.ent_coef, a.kl_coef, a.questions) == (2, 8, "episodes", "batch", 0.0, 0.0,
                                                     0.0, "walk")


def test_minibatch_count_by_unit():
    # 64 episodes of at most 15 turns: 960 step rows -> ceil(960 / 256) = 4 minibatches.
    assert VERL.minibatch_count(64, 15) == 4
    assert ASCT.minibatch_count(16, 9) == 2          # 16 episodes / 8
    assert ASCT.minibatch_count(4, 9) == 1           # fewer than 8: one minibatch
    assert P.SUBSTRATE.minibatch_count(16, 9) == 4     # the count itself


def _ppo(method="grpo", **fields):
    c = base.get_config()
    c.method = method
    for k, v in fields.items():
        c.ppo[k] = v
    return c


def test_resolve_takes_the_methods_value_where_the_config_leaves_none():
    c = _ppo("factor")
    proto = P.resolve(c.ppo, registry.get("factor").protocol)
    assert proto == dataclasses.replace(FACTOR, lr=c.ppo.lr)
    assert proto.method_lr == pytest.approx(0.5 * c.ppo.lr)


def test_a_set_field_wins_and_config_json_records_the_resolved_values():
    c = _ppo("grpo", epochs=3, lr=2e-4)
    method, run = registry.check(c)
    assert run.ppo.epochs == 3 and run.ppo.dual_clip == 3.0 and run.ppo.lr == 2e-4
    rec = run.record["ppo"]
    assert rec["epochs"] == 3 and rec["kl_coef"] == 0.01 and rec["minibatch_unit"] == "steps"
    assert rec["gamma"] == c.ppo.gamma               # the credit fields as given


def test_the_substrate_protocol_is_a_named_option():
    c = _ppo("factor", protocol="substrate")
    run = registry.check(c)[1]
    assert run.ppo == dataclasses.replace(P.SUBSTRATE, lr=c.ppo.lr)


@pytest.mark.parametrize("field,value,allowed", [
    ("minibatch_unit", "tokens", "episodes, steps"), ("epochs", 0, "int in [1, inf)"),
    ("dual_clip", 0.5, "0 or > 1"), ("protocol", "mine", "method, substrate")])
def test_a_bad_protocol_value_is_a_one_line_error_naming_the_field(field, value, allowed):
    with pytest.raises(ConfigError) as err:
        registry.check(_ppo("grpo", **{field: value}))
    assert f"ppo.{field}" in str(err.value) and allowed in str(err.value)
    assert "\n" not in str(err.value)


def test_every_protocol_field_is_a_placeholder_in_the_base_config():
    c = base.get_config()
    assert all(c.ppo[f] is None for f in P.protocol_fields())
    assert c.ppo.lr is not None and c.ppo.protocol == "method"


def test_the_asct_papers_ppo_has_no_critic():
    # The paper's PPO baseline: the terminal utility as every decision's credit, no critic,
    # no value loss, no entropy bonus (App. A.2).
    c = base.get_config()
    c.method = "ppo_return"
    _, run = registry.check(c)
    assert run.method_config.return_baseline == "none"
    assert run.ppo.vf_coef == 0.0 and run.ppo.ent_coef == 0.0
