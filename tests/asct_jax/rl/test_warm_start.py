"""The warm start (asct_jax/rl/warm_start.py): the noisy-expert data, SFT, and a run
started from it with train.init_from."""
import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from asct_jax.infra.checks import ConfigError
from asct_jax.rl import warm_start as ws
from tests.helpers.rl_train import small_config


def _source(c):
    from asct_jax.rl.sources import JaxEnvSource
    return JaxEnvSource(c)


def _warm_config(tmp_path, **train):
    c = small_config(tmp_path, **train)
    c.warm_start.update(dict(episodes=16, value_steps=3, batch=32))
    c.warm_start.sft_steps[c.env.name] = 10
    return c


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A tiny warm start written by experiments.harness.warm_start.shared (as a table makes it):
    (config, summary, out_dir)."""
    from experiments.harness.warm_start import shared
    c = _warm_config(tmp_path_factory.mktemp("warm"))
    out_dir = shared(c)
    with open(os.path.join(out_dir, "summary.json")) as f:
        return c, json.load(f), out_dir


def test_expert_episodes_masks_and_epsilon():
    c = small_config("/tmp")
    source = _source(c)
    env, params = source.env, source.env_params
    play = jax.jit(ws.expert_episodes, static_argnums=(0, 3))
    clean = play(env, params, jax.random.key(0), 8, 0.0)
    d = clean.rollout
    np.testing.assert_array_equal(clean.expert, d.turn_mask)      # every action the expert's
    # The expert's own choice in every visited state.
    states = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), d.states)
    expert = jax.vmap(env.expert_policy, in_axes=(0, None, None))(states, params,
                                                                  jax.random.key(1))
    live = np.asarray(d.turn_mask).reshape(-1)
    np.testing.assert_array_equal(np.asarray(d.action_index).reshape(-1)[live],
                                  np.asarray(expert)[live])
    assert float(jnp.mean(d.final_info["success"])) == 1.0
    assert not np.any(np.asarray(d.token_mask) & ~np.asarray(d.turn_mask)[..., None])
    noisy = play(env, params, jax.random.key(0), 8, 1.0)
    assert not np.any(noisy.expert) and np.any(noisy.rollout.turn_mask)
    half = play(env, params, jax.random.key(0), 16, 0.5)
    frac = float(jnp.sum(half.expert) / jnp.sum(half.rollout.turn_mask))
    assert 0.25 < frac < 0.75
    assert np.all(np.asarray(half.rollout.action_index)[~np.asarray(half.rollout.turn_mask)] == -1)


def test_expert_turns_are_legal_actions_off_the_experts_path():
    """shop's expert can name an illegal candidate after a random mistake: such a turn is
    played at random and is not an expert turn (SFT never trains on an illegal action)."""
    c = small_config("/tmp")
    c.env.name = "shop"
    source = _source(c)
    b = jax.jit(ws.expert_episodes, static_argnums=(0, 3))(
        source.env, source.env_params, jax.random.key(0), 32, 0.3)
    d = b.rollout
    legal = np.take_along_axis(np.asarray(d.cand_mask),
                               np.maximum(np.asarray(d.action_index), 0)[..., None], -1)[..., 0]
    assert np.all(legal[np.asarray(d.turn_mask)])


@pytest.mark.slow
def test_sft_lowers_the_loss_and_raises_held_out_expert_log_probs():
    from asct_jax.rl.build import build_policy
    c = small_config("/tmp")
    source = _source(c)
    policy, params = build_policy(c, source.vocab_size, source.shape, source.prompt)
    play = jax.jit(ws.expert_episodes, static_argnums=(0, 3))
    train = play(source.env, source.env_params, jax.random.key(1), 32, 0.3)
    held = play(source.env, source.env_params, jax.random.key(2), 16, 0.3)
    held_mb = ws.sample_turns(jax.random.key(3), held.rollout, held.expert, 64)
    before = float(ws.sft_loss(policy, params, held_mb))
    adam = optax.adam(3e-3)
    update = ws.make_update(policy, ws.sft_loss, adam)
    params, first, last = ws._fit(update, params, adam.init(params), train.rollout,
                                  train.expert, None, jax.random.key(4), 30, 64)
    after = float(ws.sft_loss(policy, params, held_mb))
    assert last < first
    assert after < before - 0.02, (before, after)


@pytest.mark.slow
def test_a_run_with_init_from_starts_from_the_warm_start(warm, tmp_path):
    from experiments.harness.runner import train_run
    c0, summary, out_dir = warm
    c = small_config(tmp_path, steps=1, eval_every=1, init_from=out_dir)
    summary_run = train_run(c)
    assert summary_run is not None
    with open(os.path.join(tmp_path, c.train.experiment, c.train.run, "metrics.jsonl")) as f:
        step0 = json.loads(f.readline())
    assert step0["step"] == 0
    for k in ("env/success", "env/score", "return"):
        assert step0[f"eval/{k}"] == pytest.approx(summary["actor"][k], abs=1e-6), k
    assert summary["expert"]["env/success"] == 1.0
    assert summary["sft_loss_last"] < summary["sft_loss_first"]


@pytest.mark.slow
def test_init_from_errors_name_the_field(warm, tmp_path):
    from asct_jax.rl.build import build_learner
    from experiments.harness import registry
    _, _, out_dir = warm
    for init_from, fix in [(str(tmp_path / "nowhere"), {}),
                           (out_dir, {"hidden_size": 48})]:
        c = small_config(tmp_path, init_from=init_from)
        c.model.update(fix)
        with pytest.raises(ConfigError, match=r"^train\.init_from: ") as e:
            build_learner(c, registry.get(c.method), _source(c))
        assert "\n" not in str(e.value)


def test_runs_stored_before_init_from_still_match_a_fresh_config(tmp_path):
    """A config.json written before train.init_from / warm_start existed is the same run."""
    from asct_jax.infra.config_cli import config_to_dict
    from experiments.harness import registry
    from experiments.harness.runner import config_differences
    c = small_config(tmp_path)
    stored = config_to_dict(registry.check(c)[1].record)    # what config.json holds
    del stored["train"]["init_from"], stored["warm_start"]
    assert config_differences(stored, c) == []
    c.train.init_from = "elsewhere"
    assert config_differences(stored, c) == ["train.init_from"]


@pytest.mark.slow
def test_one_warm_start_is_shared_by_methods_seeds_and_scales(warm):
    from experiments.harness.runner import apply_overrides, from_warm_start
    from experiments.harness.warm_start import key
    c, _, out_dir = warm
    c = c.copy_and_resolve_references()
    c.table = ml_collections.ConfigDict({"warm_start": False})
    assert from_warm_start(c, {"method": "serl"}) == {"method": "serl"}
    c.table.warm_start = True
    stamp = os.path.getmtime(os.path.join(out_dir, "summary.json"))
    for overrides in ({"method": "serl"}, {"method": "factor", "seed": 1337, "ppo.lr": 1e-4},
                      {"train.eval_episodes": 7, "train.experiment": "another_table"}):
        got = from_warm_start(c, overrides)
        assert got == dict(overrides, **{"train.init_from": out_dir})   # reused, not remade
    assert os.path.getmtime(os.path.join(out_dir, "summary.json")) == stamp
    assert os.path.basename(out_dir) == key(c) and key(c).startswith("household-")
    for change in ({"warm_start.epsilon": 0.5}, {"env.size": "medium"},
                   {"warm_start.sft_steps.household": 11}, {"model.hidden_size": 48}):
        assert key(apply_overrides(c, change)) != key(c), change


@pytest.mark.slow
def test_summary_records_the_warm_start_fields(warm):
    c, summary, out_dir = warm
    assert summary["warm_start"]["sft_steps"] == c.warm_start.sft_steps.to_dict()
    assert summary["warm_start"]["episodes"] == c.warm_start.episodes == 16
    assert os.path.exists(out_dir + ".lock")   # the lock concurrent makers take turns on


def test_table_config_args_with_warm():
    from experiments.configs import asct_ragspace, base, factor_fig5, factor_table
    c = factor_table.get_config("quick_warm")
    assert c.table.warm_start and c.train.experiment == "factor_table_quick_warm"
    assert c.ppo.lr == base.WARM_START_LR < factor_table.get_config("quick").ppo.lr
    assert "gigpo" in c.table.methods
    assert not factor_table.get_config("quick").table.warm_start
    c = asct_ragspace.get_config("warm")
    assert c.table.warm_start and c.train.experiment == "asct_ragspace_warm"
    f = factor_fig5.get_config("smoke_warm")
    assert f.fig5.warm_start and f.fig5.name == "fig5_smoke_warm" and f.train.steps == 10
    with pytest.raises(ValueError, match="'smoke_warm'.*got 'tiny_warm'"):
        asct_ragspace.get_config("tiny_warm")


def test_shared_warm_start_name_depends_on_what_its_environment_reads():
    """experiments.harness.warm_start.key: the candidate-scoring actor's warm start ignores the
    actor section and the other environments' SFT steps; a generating actor's does not."""
    from experiments.configs import base
    from experiments.harness import warm_start as shared_ws

    c = base.get_config()
    c.env.name = "shop"
    name = shared_ws.key(c)
    c.warm_start.sft_steps.household += 1
    c.actor.response_len += 1
    assert shared_ws.key(c) == name
    c.warm_start.sft_steps.shop += 1
    assert shared_ws.key(c) != name
    c.actor.chooser = "generate"
    gen = shared_ws.key(c)
    c.actor.chooser = "candidates"
    assert shared_ws.key(c) != gen
    c.actor.chooser = "generate"
    c.actor.response_len += 1
    assert shared_ws.key(c) != gen


# ------------------------------------------------ warm_start.label_smoothing (issue 38)
from hypothesis import given, settings, strategies as st  # noqa: E402
from tests.helpers.tiers import examples  # noqa: E402


@settings(max_examples=examples(50), deadline=None)
@given(st.integers(0, 2**31 - 1), st.one_of(st.just(0.0), st.floats(1e-3, 0.99)))
def test_smoothed_targets_sum_to_one_over_the_legal_labels(seed, s):
    rng = np.random.default_rng(seed)
    legal = rng.random((6, 5)) < 0.6
    legal[np.arange(6), rng.integers(0, 5, 6)] = True                 # >= 1 legal label
    index = np.array([rng.choice(np.flatnonzero(row)) for row in legal])
    q = np.asarray(ws.smoothed_targets(jnp.asarray(index), jnp.asarray(legal), s))
    np.testing.assert_allclose(q.sum(-1), 1.0, rtol=1e-5)
    assert np.all(q[~legal] == 0) and np.all(q[legal] > 0 if s > 0 else q[legal] >= 0)
    n = legal.sum(-1)
    np.testing.assert_allclose(q[np.arange(6), index], 1 - s + s / n, rtol=1e-5)
    assert np.all(q.argmax(-1) == index)                # the expert's label stays the mode


class _FixedScores:
    """A policy whose candidate_log_probs are the given logits normalised over the legal
    labels (what smoothed_sft_loss reads)."""

    def __init__(self, logits):
        self.logits = logits

    def candidate_log_probs(self, params, obs, cands, legal):
        z = jnp.where(legal, self.logits, -1e9)
        return jax.nn.log_softmax(z, -1), None, None


@settings(max_examples=examples(30), deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.01, 0.9))
def test_the_smoothed_loss_is_least_at_the_smoothed_targets(seed, s):
    """Gibbs' inequality: -sum q log pi >= -sum q log q, equality at pi = q."""
    rng = np.random.default_rng(seed)
    legal = np.ones((4, 3), bool)
    legal[0, 2] = False
    index = jnp.asarray(rng.integers(0, 2, 4))
    mb = {"obs": None, "cands": None, "legal": jnp.asarray(legal), "index": index}
    q = ws.smoothed_targets(index, mb["legal"], s)
    at_q = ws.smoothed_sft_loss(_FixedScores(jnp.log(jnp.maximum(q, 1e-30))), None, mb, s)
    other = ws.smoothed_sft_loss(_FixedScores(jnp.asarray(rng.normal(size=(4, 3)) * 3)),
                                 None, mb, s)
    onehot = ws.smoothed_sft_loss(_FixedScores(jax.nn.one_hot(index, 3) * 20), None, mb, s)
    assert float(at_q) <= float(other) + 1e-5 and float(at_q) < float(onehot)


def test_label_smoothing_off_is_the_expert_sft_and_on_is_checked():
    from asct_jax.rl.build import build_policy
    from asct_jax.rl.run_config import run_config
    from experiments.harness import registry
    c = small_config("/tmp")
    source = _source(c)
    policy, _ = build_policy(c, source.vocab_size, source.shape, source.prompt)
    assert ws.sft_objective(run_config(c), policy) is ws.sft_loss
    c.warm_start.label_smoothing = 0.3
    smoothed = ws.sft_objective(run_config(c), policy)
    assert smoothed.func is ws.smoothed_sft_loss and smoothed.keywords == {"smoothing": 0.3}
    c.warm_start.label_smoothing = 1.0
    with pytest.raises(ConfigError, match=r"^warm_start\.label_smoothing: ") as e:
        registry.check(c)
    assert "\n" not in str(e.value)


def test_label_smoothing_refuses_a_generating_actor():
    from asct_jax.rl.generation import GenerationPolicy
    from asct_jax.rl.run_config import run_config

    generating = object.__new__(GenerationPolicy)   # asct_jax.rl.actor.generates asks its type
    object.__setattr__(generating, "spec", object())
    c = small_config("/tmp")
    c.warm_start.label_smoothing = 0.2
    with pytest.raises(ConfigError, match=r"^warm_start\.label_smoothing: "):
        ws.sft_objective(run_config(c), generating)


def test_label_smoothing_off_keeps_the_warm_starts_names():
    """A warm start named before the field existed keeps its name at 0; another value
    names another warm start (the ASCT table's)."""
    from experiments.configs import asct_ragspace, base
    from experiments.harness import warm_start as shared_ws
    for c in (base.get_config(), asct_ragspace.get_config("quick_warm")):
        c.warm_start.label_smoothing = 0.0
        name = shared_ws.key(c)
        del c.warm_start["label_smoothing"]        # a config of before the field
        assert shared_ws.key(c) == name
        c.warm_start.label_smoothing = 0.25
        assert shared_ws.key(c) != name


@pytest.mark.slow
def test_label_smoothing_off_leaves_the_warm_start_params_unchanged(tmp_path):
    """warm_start with label_smoothing 0 and with the field absent (a config of before
    it): the same params, leaf by leaf; 0.5 moves them."""
    c = _warm_config(tmp_path)
    c.warm_start.update(dict(episodes=8, value_steps=1, batch=16))
    c.warm_start.sft_steps[c.env.name] = 3
    source = _source(c)
    at_zero, _ = ws.warm_start(c, source)
    old = c.copy_and_resolve_references()
    del old.warm_start["label_smoothing"]
    before, _ = ws.warm_start(old, source)
    jax.tree.map(np.testing.assert_array_equal, at_zero, before)
    c.warm_start.label_smoothing = 0.5
    smoothed, _ = ws.warm_start(c, source)
    diff = jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))),
                                        at_zero, smoothed))
    assert max(diff) > 0
