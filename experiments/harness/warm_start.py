"""Writes the warm start every method can train from: SFT on the epsilon-noisy scripted
expert, then the value head (asct_jax/rl/warm_start.py), with the phases between them
that the methods supply (`phases`: factor_jax's hindsight reading, warm_start.phase).

    python -m experiments.harness.warm_start --config experiments/configs/base.py \
        --config.env.name=household
    python -m experiments.train --config experiments/configs/base.py \
        --config.env.name=household --config.train.init_from=results/train/warm_start

Writes results/<experiment>/warm_start/: checkpoint/ (orbax, the params only), config.json and
summary.json: the held-out success / score of the warm-started actor (the trainer's
evaluation: train.eval_episodes episodes of the key train.eval_seed, exactly the step-0
evaluation of a run with train.init_from) beside the expert's and the uniform-random
policy's on the same tasks. Exit status 1 if the directory already holds a warm start.
The keys come from --config.warm_start.seed (not --config.seed).

Tables and figures share one warm start per environment and model across methods, seeds,
scales and scripts (`shared`, used by the "_warm" configs): made once under
results/warm_start/<env>-<hash of the fields it depends on>/, reused after. The warm
starts of `experiments.reproduce --config.quick` are shipped with the code, under
experiments/artifacts/warm_start/<the same name>/ (experiments/harness/warm_start_artifacts.py
writes them): `shared` copies a shipped one instead of making it. The name hashes every
field the warm start depends on, so a shipped warm start is only ever found by the configs
that would make it.
"""
from __future__ import annotations

import json
import os
import sys
import time

import jax

from asct_jax.infra import config_cli
from asct_jax.infra.run_logger import atomic_write_json
from experiments.harness.dotted import flatten, under
from experiments.harness.stored_fields import (ADDED_DEFAULTS, RENAMED_FIELDS, WARM_START_FIELDS,
                                               renamed)

KEYS = ("env/success", "env/score", "return", "episode_len")
GEN_KEYS = ("gen/invalid", "gen/multi_token_action",   # a generating actor's (actor.chooser)
            "gen/think_tokens", "gen/action_tokens")


def phases():
    """The warm-start phases between SFT and the value fit (asct_jax.rl.warm_start
    .WarmStartPhase), in order: factor_jax's hindsight phase (warm_start.phase; off,
    it returns the params unchanged)."""
    from factor_jax.hindsight.warm_start import hindsight_phase

    return (hindsight_phase,)


def scripted_metrics(source, num_episodes: int, eval_seed: int, epsilons,
                     imitated: str = "expert"):
    """Held-out metrics of the epsilon-noisy expert for each epsilon of `epsilons` (0: the
    expert, 1.0: uniform random) on the tasks of the trainer's evaluation (key(eval_seed),
    num_episodes episodes); one compiled program, epsilon an argument."""
    import jax.numpy as jnp

    from asct_jax.rl.rollout import episode_metrics
    from asct_jax.rl.warm_start import expert_episodes

    @jax.jit
    def play(key, epsilon):
        data = expert_episodes(source.env, source.env_params, key, num_episodes, epsilon,
                               source.prompt.pad_id, imitated).rollout
        return episode_metrics(data)
    key = jax.random.key(eval_seed)
    return [{k: float(v) for k, v in play(key, jnp.float32(e)).items()} for e in epsilons]


def run(config, out_dir: str = None):
    """Warm start, save, evaluate; returns the summary dict. out_dir: default
    results/<experiment>/warm_start."""
    import dataclasses

    from asct_jax.rl.build import build_learner
    from asct_jax.rl.params_io import save_params
    from asct_jax.rl.sources import JaxEnvSource
    from asct_jax.rl.train_step import policy_params
    from asct_jax.rl.warm_start import warm_start
    from experiments.harness import registry

    method, rc = registry.check(config)   # the edge: every section typed and checked
    tc = rc.train
    out_dir = out_dir or os.path.join(tc.results_dir, tc.experiment, "warm_start")
    if os.path.exists(os.path.join(out_dir, "checkpoint")):
        raise FileExistsError(f"{out_dir} already holds a warm start; delete it or choose "
                              "another --config.train.experiment")
    source = JaxEnvSource(rc)
    t0 = time.time()
    params, info = warm_start(rc, source, phases())
    save_params(out_dir, params, extra={"env": rc.env.name, "seed": rc.warm_start.seed})
    atomic_write_json(os.path.join(out_dir, "config.json"), rc.record)
    wall = time.time() - t0
    # The trainer's own step-0 evaluation of a run started from the saved params.
    warm = rc.replace(train=dataclasses.replace(tc, init_from=out_dir))
    learner = build_learner(warm, method, source)
    actor = source.make_eval(learner)(policy_params(learner.init_state))
    summary = {
        "env": rc.env.name, "seed": rc.warm_start.seed, "eval_episodes": tc.eval_episodes,
        "eval_seed": tc.eval_seed, "eval_greedy": tc.eval_greedy,
        "warm_start": rc.record["warm_start"], "warm_start_s": wall, **info,
        "actor": {k: actor[f"eval/{k}"] for k in KEYS + GEN_KEYS if f"eval/{k}" in actor},
        # "expert": the imitated scripted policy (warm_start.imitated), noise-free;
        # "random": epsilon 1 (the scripted policy is never asked).
        **{who: {k: v for k, v in m.items() if k in KEYS} for who, m in zip(
            ("expert", "random"), scripted_metrics(source, tc.eval_episodes, tc.eval_seed,
                                                   (0.0, 1.0), rc.warm_start.imitated))},
    }
    atomic_write_json(os.path.join(out_dir, "summary.json"), summary)
    return summary


PARAMS_LAYOUT = "layers stacked"
# The shipped warm starts (experiments/harness/warm_start_artifacts.py):
# <ARTIFACTS>/<key(config)>/ (experiments/artifacts/warm_start/).
ARTIFACTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "artifacts", "warm_start")


def artifact(config):
    """The shipped warm start of config (ARTIFACTS/<key(config)>/), or None."""
    path = os.path.join(ARTIFACTS, key(config))
    return path if os.path.exists(os.path.join(path, "summary.json")) else None


def key(config) -> str:
    """The name of config's shared warm start: <env>-<the first 8 hex digits of a SHA-256 of
    its WARM_START_FIELDS (experiments/harness/stored_fields.py)>; equal fields, same warm start."""
    return name_of(config.env.name, _depends(config))


def name_of(env: str, fields: dict) -> str:
    """key's name from the environment's name and the fields `depends_on` keeps."""
    import hashlib

    # Hashed under the fields' names before issue 50's renames (stored_fields
    # .RENAMED_FIELDS), so that every warm start keeps its name.
    old = {new: old for old, new in RENAMED_FIELDS.items()}
    fields = {old.get(k, k): v for k, v in fields.items()}
    # The environments' shared vocabulary too: a new environment's words shift the ids.
    from asct_jax.envs import tokenizer
    fields["vocabulary"] = hashlib.sha256(" ".join(tokenizer.vocabulary()).encode()).hexdigest()
    # The checkpoint's parameter layout (issue 37: the decoder's layers stacked [L, ...]);
    # warm starts written in the per-layer layout before it keep their names and are not read.
    fields["params_layout"] = PARAMS_LAYOUT
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode())
    return f"{env}-{digest.hexdigest()[:8]}"


def _depends(config) -> dict:
    from asct_jax.infra.config_cli import config_to_dict

    return depends_on(flatten(config_to_dict(config)))


# Fields added after warm starts were named, at the value those warm starts had: left out
# of the name, so that the existing warm starts keep theirs.
KEY_NEUTRAL = {k: ADDED_DEFAULTS[k] for k in ("actor.think", "actor.logits_chunk",
                                               "model.attention_block",
                                               "model.value_detached",
                                               "warm_start.label_smoothing",
                                               "warm_start.phase",
                                               "warm_start.phase_steps",
                                               "warm_start.reasoning")}


def depends_on(flat: dict) -> dict:
    """The WARM_START_FIELDS of a flat config that its environment's warm start reads: the
    actor section only for a generating actor (its continuations aside: no warm start
    restores a state), the SFT steps of its own environment only; old names renamed
    (stored_fields.renamed)."""
    flat = renamed(flat)
    generate = flat.get("actor.chooser", "candidates") != "candidates"
    own_steps = f"warm_start.sft_steps.{flat.get('env.name')}"
    return {k: v for k, v in flat.items() if under(k, WARM_START_FIELDS)
            and (generate or not under(k, ("actor",))) and k != "actor.continuations"
            and not (k in KEY_NEUTRAL and v == KEY_NEUTRAL[k])
            and (k == own_steps or not under(k, ("warm_start.sft_steps",)))}


def shared(config) -> str:
    """The warm start every table, figure and scale shares for config's environment and
    model: results/warm_start/<key(config)>/, made now if absent (copied from the shipped
    one, `artifact(config)`, where there is one; else made with seed config.warm_start.seed
    and evaluated with config's train.eval_*), else reused. Returns the
    directory (for train.init_from). Processes that ask for the same warm start at once
    (`reproduce --config.jobs=2`) take turns on a lock file: one makes it, the others reuse it."""
    import fcntl
    import shutil

    out_dir = os.path.join(config.train.results_dir, "warm_start", key(config))
    os.makedirs(os.path.dirname(out_dir), exist_ok=True)
    with open(out_dir + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        if not os.path.exists(os.path.join(out_dir, "summary.json")):
            for partial in (out_dir, out_dir + ".copy"):   # an interrupted make or copy
                if os.path.exists(partial):
                    shutil.rmtree(partial)
            shipped = artifact(config)
            if shipped is not None:
                shutil.copytree(shipped, out_dir + ".copy")
                os.replace(out_dir + ".copy", out_dir)
                print(f"warm start {key(config)}: shipped "
                      f"({os.path.relpath(shipped, os.getcwd())})", flush=True)
                return _checked(config, out_dir)
            s = run(config, out_dir)
            print(f"warm start {key(config)}: actor success {s['actor']['env/success']:.3f} "
                  f"(expert {s['expert']['env/success']:.3f}, random "
                  f"{s['random']['env/success']:.3f}); {s['warm_start_s']:.0f} s", flush=True)
            return out_dir
    return _checked(config, out_dir)


def _checked(config, out_dir: str) -> str:
    """out_dir, once its config.json is config's in every field the warm start reads."""
    with open(os.path.join(out_dir, "config.json")) as f:
        stored = depends_on(flatten(json.load(f)))
    if json.loads(json.dumps(stored)) != json.loads(json.dumps(_depends(config))):
        raise ValueError(f"{out_dir}: its config.json does not match its name; delete it")
    return out_dir


def main(config):
    try:
        s = run(config)
    except FileExistsError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    for who in ("actor", "expert", "random"):
        print(f"{who:7s} success {s[who]['env/success']:.3f}  score {s[who]['env/score']:.3f}")
    print(f"warm start {s['warm_start_s']:.0f} s; sft loss {s['sft_loss_first']:.3f} -> "
          f"{s['sft_loss_last']:.3f}; value loss {s['value_loss_first']:.3f} -> "
          f"{s['value_loss_last']:.3f}")


if __name__ == "__main__":
    config_cli.run_main(main)
