"""How many Adam steps TAC's head needs to fit a FACTOR run's replay (docs/results/
regime.md, FACTOR's critic).

    python -m experiments.studies.critic_fit --config.state=<run>/checkpoints/<step>/state \
        ["--config.lrs=(1e-4, 1e-3)"]

Reads the critic's replay from a FACTOR run's checkpoint (the boundary features and the
Monte-Carlo targets of its last factor.replay_steps steps), holds a quarter of the targets
out, and fits a fresh head (factor_jax.critic: init_head's initialisation, critic_step's
Adam step on up to 256 drawn targets) for 200 steps at each lr (default the authors'
1e-4, 3e-4, 1e-3), printing the training and held-out MSE and the held-out Pearson r of
V(h) with the target after 1, 10, 30, 100 and 200 steps, beside the targets' variance
(the MSE of their mean). A diagnostic of one replay, not a training run.
"""
from __future__ import annotations

import os
from typing import Dict, List, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from factor_jax import critic as tac_critic

CONFIG = "experiments/configs/studies/critic_fit.py"
CHECKS = (1, 10, 30, 100, 200)


def read_replay(state_dir: str):
    """(features [n, H], targets [n]) of the valid entries of a checkpoint's replay."""
    import orbax.checkpoint as ocp

    raw = ocp.StandardCheckpointer().restore(os.path.abspath(state_dir))
    f, t, v = (np.asarray(raw[f"method_state.{k}"]) for k in ("features", "targets", "valid"))
    return f[v], t[v]


def fit_curve(features, targets, lr: float, seed: int = 0, width: int = 1024,
              sample: int = 256, checks: Sequence[int] = CHECKS) -> List[Dict[str, float]]:
    """Fits a fresh head on 3/4 of (features [n, H], targets [n]) for max(checks) critic
    steps at `lr`; at each step in `checks`: {"step", "train_mse" (the step's sample),
    "test_mse", "test_r"} on the held-out quarter."""
    perm = np.random.default_rng(seed).permutation(len(targets))
    tr, te = perm[: len(targets) * 3 // 4], perm[len(targets) * 3 // 4:]
    s = tac_critic.init_critic(jax.random.key(seed), features.shape[1], width, 1, len(tr), lr)
    s = s.replace(features=jnp.asarray(features[tr])[None],
                  targets=jnp.asarray(targets[tr])[None], valid=jnp.ones((1, len(tr)), bool))
    step = jax.jit(lambda s, k: tac_critic.critic_step(s, k, lr, sample, 0.0))
    x_te, y_te = jnp.asarray(features[te]), np.asarray(targets[te])
    out = []
    for i in range(1, max(checks) + 1):
        s, m = step(s, jax.random.key(seed * 100_003 + i))
        if i in checks:
            v = np.asarray(tac_critic.head_value(s.online, x_te))
            r = float(np.corrcoef(v, y_te)[0, 1]) if v.std() > 0 else float("nan")
            out.append({"step": i, "train_mse": float(m["critic_loss"]),
                        "test_mse": float(np.mean((v - y_te) ** 2)), "test_r": r})
    return out


def main(args) -> None:
    """Fits at each of `args.lrs` (experiments/configs/studies/critic_fit.py)."""
    if not args.state:
        raise ConfigError("state", "missing", "<run>/checkpoints/<step>/state")
    features, targets = read_replay(args.state)
    lrs = [float(lr) for lr in args.lrs]
    print(f"{len(targets)} targets, mean {targets.mean():.3f}, variance {targets.var():.4f}")
    for lr in lrs:
        row = " | ".join(f"{c['step']}: train {c['train_mse']:.4f} test {c['test_mse']:.4f} "
                         f"r {c['test_r']:.2f}" for c in fit_curve(features, targets, lr))
        print(f"lr {lr:g} | {row}")


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
