"""Runs a grid of (variant, seed) training runs and turns their summaries into tables.

A variant is a name plus config overrides (dotted field names). Each run lives in
results/<experiment>/<variant>_s<seed>/; a run whose summary.json exists is not run
again, so an interrupted table script picks up where it stopped — but only if its stored
config.json is the config this call would train (table.* and where it is written aside);
otherwise the grid stops with the differing fields named, so results of another scale
are never mixed into a table. A variant's seeds train as one compiled program when
config.train.batch_seeds is set; compiled programs are reused across processes through
JAX's persistent compilation cache (config.train.compilation_cache).
"""
from __future__ import annotations

import copy
import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text
from asct_jax.infra.tables import seed_table

Variant = Tuple[str, Mapping[str, Any]]

# Fields that do not change what a run computes.
_NOT_COMPARED = ("table", "train.experiment", "train.resume", "train.results_dir",
                 "train.progress", "train.compilation_cache", "warm_start")
# Fields added after runs were stored, with the value a config.json without them meant.
_ADDED_DEFAULTS = {"train.init_from": "", "factor.alloc_tokens": "all"}


def flatten(d: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in d.items():
        key = prefix + k
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_differences(stored: Mapping[str, Any], config) -> List[str]:
    """Dotted fields where a finished run's config.json and `config` disagree."""
    from asct_jax.infra.config_cli import config_to_dict

    a = {**_ADDED_DEFAULTS, **flatten(stored)}
    b = flatten(config_to_dict(config))
    keys = {k for k in set(a) | set(b)
            if not any(k == n or k.startswith(n + ".") for n in _NOT_COMPARED)}
    return sorted(k for k in keys if a.get(k) != b.get(k))


def train_run(config, return_params: bool = False, source=None):
    """trainer.train with the method config.method names in the registry."""
    from asct_jax.rl import trainer
    from experiments import registry

    return trainer.train(config, registry.get(config.method), source=source,
                         return_params=return_params)


def train_seeds_run(configs, return_params: bool = False):
    """trainer.train_seeds (one compiled program for the seeds of one config)."""
    from asct_jax.rl import trainer
    from experiments import registry

    return trainer.train_seeds(configs, registry.get(configs[0].method),
                               return_params=return_params)


def apply_overrides(config, overrides: Mapping[str, Any]):
    """A copy of `config` with dotted fields set; an unknown field is a one-line error."""
    c = copy.deepcopy(config)
    for dotted, value in overrides.items():
        node = c
        *path, last = dotted.split(".")
        for p in path:
            node = node[p]
        if last not in node:
            raise ValueError(f"override {dotted}: unknown field; allowed: {sorted(node.keys())}")
        node[last] = value
    return c


def from_warm_start(base, overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """`overrides` plus train.init_from = the shared warm start (made once, reused) of the
    environment and model the overridden config trains, when base.table.warm_start is set
    (experiments.warm_start.shared); else `overrides` unchanged."""
    if not base.get("table", {}).get("warm_start"):
        return dict(overrides)
    from experiments.warm_start import shared

    return dict(overrides, **{"train.init_from": shared(apply_overrides(base, overrides))})


def run_grid(base, variants: Sequence[Variant], seeds: Sequence[int], experiment: str,
             after_run: Optional[Callable[[Any, Dict[str, Any], Any], Dict[str, Any]]] = None,
             train: Optional[Callable[..., Any]] = None
             ) -> Dict[str, List[Dict[str, Any]]]:
    """Trains every variant with every seed; returns {variant: [summary per seed]}.

    after_run(config, summary, params) may add entries to a run's summary (e.g. a transfer
    evaluation); it runs once, before summary.json is written. train(config,
    return_params=True) -> (summary, params) trains one run; by default the runs of a
    variant that are not finished train together as one compiled program
    (`train_seeds`) when config.train.batch_seeds is set, else one by one (`train_run`).
    """
    out: Dict[str, List[Dict[str, Any]]] = {}
    for name, overrides in variants:
        configs = []
        for seed in seeds:
            c = apply_overrides(base, dict(overrides, seed=seed))
            c.train.experiment = experiment
            c.train.run = f"{name}_s{seed}"
            configs.append(c)
        done = {i: _finished_summary(c) for i, c in enumerate(configs)}
        todo = [c for i, c in enumerate(configs) if done[i] is None]
        if train is None and base.train.get("batch_seeds") and len(todo) > 1:
            trained = train_seeds_run(todo, return_params=True)
        else:
            trained = [(train or train_run)(c, return_params=True) for c in todo]
        for c, (summary, params) in zip(todo, trained):
            if after_run is not None:
                summary.update(after_run(c, summary, params))
            atomic_write_json(_run_path(c, "summary.json"), summary)
        new = iter(summary for summary, _ in trained)
        out[name] = [done[i] if done[i] is not None else next(new) for i in range(len(configs))]
    return out


def _run_path(config, name: str) -> str:
    tc = config.train
    return os.path.join(tc.results_dir, tc.experiment, tc.run, name)


def _finished_summary(config) -> Optional[Dict[str, Any]]:
    """The summary of a finished run of exactly this config, or None if it has not run."""
    done = _run_path(config, "summary.json")
    if not os.path.exists(done):
        return None
    with open(_run_path(config, "config.json")) as f:
        diff = config_differences(json.load(f), config)
    if diff:
        raise ValueError(
            f"{os.path.dirname(done)} finished with another config (fields {', '.join(diff)});"
            " set --config.train.experiment to a new name or delete that run")
    with open(done) as f:
        return json.load(f)


def write_table(results: Dict[str, List[Dict[str, Any]]], metrics: Mapping[str, str],
                path_stem: str, fmt="{:.3f}") -> str:
    """Markdown (mean ± sample std over seeds) and JSON (per-seed values) side by side.

    metrics: {summary key: column title}.
    """
    per_metric = {name: {title: [r[key] for r in runs if r.get(key) is not None]
                         for key, title in metrics.items()}
                  for name, runs in results.items()}
    table = seed_table(per_metric, list(metrics.values()), fmt)
    atomic_write_text(path_stem + ".md", table + "\n")
    atomic_write_json(path_stem + ".json", per_metric)
    return table
