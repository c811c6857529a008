"""Records, and compares, a few steps of every registered method on every JAX environment:
the guard that a refactor leaves what the runs compute bit for bit unchanged.

    python -m experiments.checks.identity_check --config.out=/tmp/ref      # record (before)
    python -m experiments.checks.identity_check --config.out=/tmp/new \
        --config.compare=/tmp/ref                                           # after

Each case is (method, env, actor.chooser) at the tests' model size, two steps of a tiny
batch with one held-out evaluation, plus one seed-batched run (train_seeds, two seeds).
A case's metrics.jsonl (timings dropped) is stored as <out>/<case>.json; compare
reports each case whose numbers differ in any field, and exits 1 if one does. A case a
method cannot run (a ConfigError or ValueError before training) is recorded as such, so
the comparison also checks that the same cases run. only runs the cases whose name
contains any of the given substrings; jobs runs cases in that many processes (the fields of
experiments/configs/checks/identity_check.py).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
from typing import Dict, List, Tuple

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError

CONFIG = "experiments/configs/checks/identity_check.py"
CANDIDATE_ENVS = ("household", "shop", "science", "ragspace", "rag_workflow")
GENERATE_ENVS = ("shop",)


def _config(method: str, env: str, chooser: str, seed: int = 42):
    from experiments.configs import base as base_config

    c = base_config.use_test_model(base_config.get_config())
    c.seed = seed
    c.method = method
    c.env.name = env
    c.actor.chooser = chooser
    c.rollout.num_groups, c.rollout.group_size = 2, 4
    c.ppo.epochs, c.ppo.minibatches = 1, 2
    c.asct.trials = 4
    c.vineppo.k = 4
    c.factor.continuations = 2
    c.factor.horizon = 4
    c.factor.critic_width = 32
    c.actor.response_len = 12
    c.train.update(steps=2, eval_every=2, eval_episodes=8, checkpoint_every=2,
                   progress=False, compilation_cache="")
    return c


def cases() -> List[Tuple[str, str, str]]:
    """(method, env, chooser) of every case, in a fixed order."""
    from experiments.harness import registry

    out = [(m, e, "candidates") for e in CANDIDATE_ENVS for m in registry.names()]
    out += [(m, e, "generate") for e in GENERATE_ENVS for m in registry.names()]
    return out


def _name(method: str, env: str, chooser: str) -> str:
    return f"{method}__{env}__{chooser}"


def _metrics(path: str) -> List[Dict]:
    with open(path) as f:
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")
                 and k not in ("memory/peak_gb",)} for line in f]


def run_case(case) -> Tuple[str, Dict]:
    """Runs one case in a fresh temporary results folder; returns (name, record)."""
    from asct_jax.infra.checks import ConfigError
    from experiments.harness.runner import train_run, train_seeds_run

    method, env, chooser = case
    with tempfile.TemporaryDirectory() as tmp:
        if method == "__batched__":
            cfgs = [_config(env, "household", chooser, seed=s) for s in (42, 43)]
            for i, c in enumerate(cfgs):
                c.train.results_dir, c.train.run = tmp, f"s{i}"
            try:
                train_seeds_run(cfgs)
            except (ConfigError, ValueError) as err:
                return _name(method, env, chooser), {"error": type(err).__name__}
            rec = {f"s{i}": _metrics(os.path.join(tmp, "train", f"s{i}", "metrics.jsonl"))
                   for i in range(2)}
            return _name(method, env, chooser), rec
        c = _config(method, env, chooser)
        c.train.results_dir, c.train.run = tmp, "run"
        try:
            train_run(c)
        except (ConfigError, ValueError) as err:
            return _name(method, env, chooser), {"error": type(err).__name__}
        return _name(method, env, chooser), {
            "metrics": _metrics(os.path.join(tmp, "train", "run", "metrics.jsonl"))}


def _diff(a, b, path="") -> List[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in {'reference' if k in a else 'new'}"
               for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} records"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def main(args) -> int:
    """Records the cases of `args` (experiments/configs/checks/identity_check.py), then
    compares them; 1 if one differs."""
    if not args.out:
        raise ConfigError("out", "missing", "a folder for the cases' records")
    todo = cases() + [("__batched__", "factor", "candidates")]
    todo = [c for c in todo if not args.only or any(s in _name(*c) for s in args.only)]
    os.makedirs(args.out, exist_ok=True)
    todo = [c for c in todo if not os.path.exists(os.path.join(args.out, _name(*c) + ".json"))]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(max(1, args.jobs), maxtasksperchild=1) as pool:
        for name, rec in pool.imap_unordered(run_case, todo):
            tmp = os.path.join(args.out, name + ".json.tmp")
            with open(tmp, "w") as f:
                json.dump(rec, f, sort_keys=True)
            os.replace(tmp, os.path.join(args.out, name + ".json"))
            print(name, rec.get("error", "ok"), flush=True)
    if not args.compare:
        return 0
    bad = 0
    for fname in sorted(os.listdir(args.compare)):
        if not fname.endswith(".json"):
            continue
        name = fname[:-5]
        if args.only and not any(s in name for s in args.only):
            continue
        new_path = os.path.join(args.out, fname)
        if not os.path.exists(new_path):
            print(f"MISSING {name}")
            bad += 1
            continue
        with open(os.path.join(args.compare, fname)) as f, open(new_path) as g:
            diffs = _diff(json.load(f), json.load(g))
        if diffs:
            bad += 1
            print(f"DIFFERS {name}: {len(diffs)} fields, e.g. {diffs[:3]}")
    print(f"{bad} case(s) differ" if bad else "every case identical")
    return 1 if bad else 0


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
