"""Zero-shot held-out success / score of a pretrained model on the JAX-native analogues,
beside the uniform-random policy on the same tasks.

    python -m experiments.studies.zero_shot --config experiments/configs/zero_shot.py
    python -m experiments.studies.zero_shot --config experiments/configs/zero_shot.py \
        --config.model.path=/path/to/Qwen2.5-0.5B-Instruct --config.train.eval_episodes=256

The model acts through the text interface (asct_jax.envs.text_interface: its tokenizer
and chat template, candidates as constrained decoding); no training step is taken. Both
policies play the same held-out tasks (the reset keys of config.train.eval_seed).
Writes results/<experiment>/zero_shot.json and .md.
"""
from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp

from asct_jax.envs.play import play, uniform_chooser
from asct_jax.infra import config_cli
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text
from asct_jax.infra.tables import markdown_table
from asct_jax.rl.train_step import make_eval, make_mesh
from asct_jax.rl.build import build_policy
from asct_jax.rl.sources import JaxEnvSource

KEYS = ("env/success", "env/score", "episode_len")


def random_policy_metrics(env, env_params, key, num_episodes: int):
    """Uniform choice among the legal candidates on the tasks `rollout(key, N, 1)` plays."""
    def measure():
        eps = play(env, env_params, uniform_chooser, key, num_episodes, 1)
        out = {f"env/{k}": jnp.mean(v) for k, v in eps.final.info.items()}
        out["episode_len"] = jnp.mean(
            jnp.sum(eps.record["turn_mask"], axis=1).astype(jnp.float32))
        return out
    return {k: float(v) for k, v in jax.jit(measure)().items()}


def evaluate_env(config, env_name: str):
    c = config.copy_and_resolve_references()
    c.env.name = env_name
    source = JaxEnvSource(c)
    policy, params = build_policy(c, source.vocab_size, source.shape, source.prompt)
    tc = c.train
    key = jax.random.key(tc.eval_seed)
    rand = random_policy_metrics(source.env.inner, source.env_params, key, tc.eval_episodes)
    evaluate = make_eval(policy, source.env, source.env_params, tc.eval_episodes,
                         make_mesh(1), greedy=tc.eval_greedy)
    t0 = time.time()
    lowered = evaluate.lower(params, None, key)
    compiled = lowered.compile()
    t1 = time.time()
    model = {k: float(v) for k, v in compiled(params, None, key).items()}
    t2 = time.time()
    return {"env": env_name, "random": rand, "model": model,
            "compile_s": t1 - t0, "play_s": t2 - t1,
            "lengths": {"obs": source.shape.obs_len, "action": source.shape.action_len,
                        "feedback": source.shape.feedback_len}}


def main(config):
    rows, out = [], []
    out_dir = os.path.join(config.train.results_dir, config.train.experiment)
    for env_name in config.envs:
        r = evaluate_env(config, env_name)
        out.append(r)
        print(f"{env_name}: random {r['random']}  model {r['model']}  "
              f"compile {r['compile_s']:.0f} s, play {r['play_s']:.0f} s", flush=True)
        rows.append([env_name] + [f"{r['random'].get(k, float('nan')):.3f}" for k in KEYS[:2]]
                    + [f"{r['model'].get(k, float('nan')):.3f}" for k in KEYS[:2]]
                    + [f"{r['play_s']:.0f}"])
        atomic_write_json(os.path.join(out_dir, "zero_shot.json"),
                          {"model": config.model.path, "episodes": config.train.eval_episodes,
                           "greedy": config.train.eval_greedy, "results": out})
    table = markdown_table(rows, ["env", "random success", "random score", "model success",
                                  "model score", "play (s)"])
    atomic_write_text(os.path.join(out_dir, "zero_shot.md"), table + "\n")
    print(table)
    return out


if __name__ == "__main__":
    config_cli.run_main(main)
