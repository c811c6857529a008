"""The method contract's state: a method that keeps a counter and a small array across
steps trains, checkpoints and resumes to identical metrics, and runs batched over seeds
equal to separate runs (asct_jax.rl.credit.Method.init_state / update_state)."""
import json

import jax
import pytest
import jax.numpy as jnp
import numpy as np

from asct_jax.rl import advantages as adv
from asct_jax.rl import group_advantages as gadv
from asct_jax.rl.credit import Method, from_turn_advantages, value_targets_mc
from asct_jax.rl.train_step import TrainState, fsdp_shardings, make_mesh
from asct_jax.rl.trainer import train, train_seeds
from experiments.configs import base as base_config


def _init(cfg, ctx, params, key):
    return {"count": jnp.zeros((), jnp.int32), "ema": jax.random.uniform(key, (3,))}


def _update(cfg, ctx, mstate, inputs):
    """count += 1; ema <- 0.5 ema + 0.5 [mean return, mean |coef|, step]."""
    g = adv.episode_returns(inputs.batch.rewards, inputs.batch.turn_mask)
    obs = jnp.stack([jnp.mean(g), jnp.mean(jnp.abs(inputs.credit.coef)),
                     inputs.step.astype(jnp.float32)])
    new = {"count": mstate["count"] + 1, "ema": 0.5 * mstate["ema"] + 0.5 * obs}
    return new, {"count": new["count"].astype(jnp.float32), "ema0": new["ema"][0]}


def _credit(cfg, ctx):
    """GRPO's advantage scaled by a factor the state sets: the state changes training."""
    def credit(params, batch, key, step, mstate):
        g = adv.episode_returns(batch.rewards, batch.turn_mask)
        a = gadv.grpo_advantages(g, ctx.group_size) * (1.0 + jnp.tanh(mstate["ema"][0]))
        per_turn = jnp.broadcast_to(a[:, None], batch.turn_mask.shape)
        return from_turn_advantages(batch, per_turn, value_targets_mc(batch))
    return credit


COUNTER = Method("counter_for_test", _credit, init_state=_init, update_state=_update)


def _config(tmp_path, run, steps=4, seed=42, resume=False):
    c = base_config.use_test_model(base_config.get_config())
    c.seed = seed
    c.rollout.num_groups, c.rollout.group_size = 2, 4
    c.ppo.epochs, c.ppo.minibatches = 1, 2
    c.train.update(steps=steps, eval_every=2, eval_episodes=8, checkpoint_every=2,
                   results_dir=str(tmp_path), run=run, progress=False, resume=resume,
                   compilation_cache="")
    return c


def _metrics(tmp_path, run):
    with open(tmp_path / "train" / run / "metrics.jsonl") as f:
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
                for line in f]


@pytest.mark.slow
def test_state_is_carried_checkpointed_and_resumed_exactly(tmp_path):
    train(_config(tmp_path, "straight"), COUNTER)
    straight = _metrics(tmp_path, "straight")
    assert [r["method/count"] for r in straight[1:]] == [1.0, 2.0, 3.0, 4.0]
    # Two steps, stop, then resume from the step-2 checkpoint to step 4.
    train(_config(tmp_path, "resumed", steps=2), COUNTER)
    train(_config(tmp_path, "resumed", steps=4, resume=True), COUNTER)
    resumed = _metrics(tmp_path, "resumed")
    by_step = {r["step"]: r for r in resumed}
    for r in straight:
        assert by_step[r["step"]] == r, r["step"]   # bit-identical, method state included
    ckpt = tmp_path / "train" / "resumed" / "checkpoints" / "4"
    assert ckpt.exists()


@pytest.mark.slow
def test_state_batched_over_seeds_equals_separate_runs(tmp_path):
    cfgs = [_config(tmp_path / "batched", f"s{s}", steps=2, seed=s) for s in (42, 43)]
    train_seeds(cfgs, COUNTER)
    for s in (42, 43):
        train(_config(tmp_path / "separate", f"s{s}", steps=2, seed=s), COUNTER)
        a = _metrics(tmp_path / "batched", f"s{s}")
        b = _metrics(tmp_path / "separate", f"s{s}")
        assert [sorted(r) for r in a] == [sorted(r) for r in b]
        for ra, rb in zip(a, b):
            for k in ra:
                np.testing.assert_allclose(ra[k], rb[k], rtol=1e-4, atol=1e-5, err_msg=k)
    ema = [_metrics(tmp_path / "batched", f"s{s}")[-1]["method/ema0"] for s in (42, 43)]
    assert ema[0] != ema[1]   # each seed has its own state


def test_method_state_is_sharded_like_the_parameters():
    """fsdp_shardings covers the whole TrainState: a method-state leaf gets a sharding."""
    state = TrainState(params={"w": jnp.zeros((4, 2))}, opt_state=(), step=jnp.int32(0),
                       method_state={"table": jnp.zeros((8, 3)), "count": jnp.int32(0)})
    sh = fsdp_shardings(state, make_mesh(1))
    assert set(sh.method_state) == {"table", "count"}


def test_a_stateful_method_needs_both_init_and_update():
    with pytest.raises(ValueError, match="init_state and update_state"):
        Method("half", _credit, init_state=_init)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["factor", "serl"])
def test_factor_and_serl_resume_exactly(tmp_path, name):
    """The real stateful methods (FACTOR's TAC critic and replay, SERL's teacher copy):
    a run stopped at step 2 and resumed matches the uninterrupted one, step by step."""
    from experiments.harness import registry

    method = registry.get(name)

    def cfg(run, steps, resume=False):
        c = _config(tmp_path, run, steps=steps, resume=resume)
        c.method = name
        # Absolute schedules (not scaled to train.steps, which differs at the stop), short
        # enough that 4 steps run the warm-up, TAC + HTA and a teacher re-sync.
        c.factor.update(scale_schedules=False, warmup_steps=1, eta_start=2, eta_end=4,
                        eta_decay=5, kl_decay=5)
        c.serl.update(scale_schedules=False, resync_every=2, decay_steps=5)
        return c

    train(cfg("straight", 4), method)
    train(cfg("resumed", 2), method)
    train(cfg("resumed", 4, resume=True), method)
    straight, resumed = _metrics(tmp_path, "straight"), _metrics(tmp_path, "resumed")
    by_step = {r["step"]: r for r in resumed}
    for r in straight:
        assert by_step[r["step"]] == r, r["step"]   # bit-identical, method state included
