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

import json
import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from asct_jax.infra.checks import ConfigError
from asct_jax.infra.distributed import is_primary
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text
from asct_jax.infra.tables import markdown_table, seed_table
from experiments.configs.base import TUNING_SEED
from experiments.harness.dotted import apply_overrides, flatten, under
from experiments.harness.stored_fields import BOOKKEEPING_FIELDS, as_current

Variant = Tuple[str, Mapping[str, Any]]
# Where run_grid's status line of a finished run goes when runs show no progress bar
# (train.progress False: `experiments.reproduce --config.quick`); None: print.
STATUS: Optional[Callable[[str], None]] = None



def config_differences(stored: Mapping[str, Any], config) -> List[str]:
    """Dotted fields where a finished run's config.json and `config` disagree."""
    from experiments.harness import registry

    a = as_current(stored)
    b = flatten(registry.check(config)[1].record)     # the ppo protocol resolved
    keys = {k for k in set(a) | set(b) if not under(k, BOOKKEEPING_FIELDS)}
    return sorted(k for k in keys if a.get(k) != b.get(k))


def start_processes(run, source=None) -> None:
    """Joins the processes of train.distributed (asct_jax.infra.distributed; run: a
    RunConfig), before anything is built. Host-side games (`source`) run in one process
    only."""
    from asct_jax.infra import distributed

    if distributed.initialize(run.train.distributed) and source is not None:
        raise ConfigError(f"{distributed.FIELD}.enabled", "host-side games play in one "
                          "process; several processes run the JAX-native environments",
                          "False")


def train_run(config, return_params: bool = False, source=None, return_state: bool = False):
    """trainer.train with the method config.method names in the registry (its config
    checked first: experiments.harness.registry.check), in every process of
    config.train.distributed."""
    from asct_jax.rl import trainer
    from experiments.harness import registry

    method, run = registry.check(config)
    start_processes(run, source)
    return trainer.train(run, method, source=source, return_params=return_params,
                         return_state=return_state)


def restore_run_state(learner, checkpoint_dir: str, step: Optional[int] = None):
    """(state, step) of a run's checkpoint `step` (default: its last) into `learner`'s
    init state; the frozen parameters, which checkpoints leave out, are the learner's."""
    from asct_jax.infra.checkpoint import Checkpointer

    init = learner.init_state
    restored = Checkpointer(checkpoint_dir).restore(init.replace(frozen=None), step=step)
    return restored.state.replace(frozen=init.frozen), restored.step


def train_seeds_run(configs, return_params: bool = False):
    """trainer.train_seeds (one compiled program for the seeds of one config), each
    config checked and typed first (experiments.harness.registry.check)."""
    from asct_jax.rl import trainer
    from experiments.harness import registry

    checked = [registry.check(c) for c in configs]
    runs = [run for _, run in checked]
    if runs:
        start_processes(runs[0])
    return trainer.train_seeds(runs, checked[0][0], return_params=return_params)


def check_variant(base, overrides: Mapping[str, Any]):
    """The config of `base` with `overrides`, checked: names, types (apply_overrides),
    the overridden values against the base config's constraints, and the method's and
    the update's typed configs (experiments.harness.registry.check). A one-line ConfigError
    otherwise (exit 2 from a script), before anything is trained."""
    from asct_jax.infra.config_cli import validate
    from experiments.configs.base import get_constraints
    from experiments.harness import registry

    c = apply_overrides(base, overrides)
    rules = get_constraints()
    validate(c, {k: rules[k] for k in overrides if k in rules and k != "env.name"})
    registry.check(c)
    return c


def from_warm_start(base, overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """`overrides` plus train.init_from = the shared warm start (made once, reused) of the
    environment and model the overridden config trains, when base.table.warm_start is set
    (experiments.harness.warm_start.shared); else `overrides` unchanged. The variant is checked
    first (check_variant)."""
    check_variant(base, overrides)
    if not base.get("table", {}).get("warm_start"):
        return dict(overrides)
    from experiments.harness.warm_start import shared

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
    grid = {}
    for name, overrides in variants:   # every variant checked before anything trains
        configs = []
        for seed in seeds:
            c = check_variant(base, dict(overrides, seed=seed))
            c.train.experiment = experiment
            c.train.run = f"{name}_s{seed}"
            configs.append(c)
        grid[name] = configs
    out: Dict[str, List[Dict[str, Any]]] = {}
    for name, configs in grid.items():
        done = {i: _finished_summary(c) for i, c in enumerate(configs)}
        todo = [c for i, c in enumerate(configs) if done[i] is None]
        if train is None and base.train.get("batch_seeds") and len(todo) > 1:
            trained = train_seeds_run(todo, return_params=True)
        else:
            trained = [(train or train_run)(c, return_params=True) for c in todo]
        for c, (summary, params) in zip(todo, trained):
            if after_run is not None:
                summary.update(after_run(c, summary, params))
            if is_primary():
                atomic_write_json(_run_path(c, "summary.json"), summary)
                if not c.train.get("progress", True):
                    (STATUS or print)(status_line(c, summary))
        new = iter(summary for summary, _ in trained)
        out[name] = [done[i] if done[i] is not None else next(new) for i in range(len(configs))]
    return out


def status_line(config, summary: Mapping[str, Any]) -> str:
    """One line on a finished run: its name, its held-out metric from its start to its end
    (utility where the environment has one, else success) and its wall clock."""
    tc = config.train
    key = next((k for k in ("env/utility", "env/success") if f"final/{k}" in summary), None)
    start = summary.get(f"initial/{key}", float("nan"))
    moved = ("" if key is None else f" held-out {key.split('/')[-1]} "
             f"{start:.3f} -> {summary[f'final/{key}']:.3f},")
    wall = summary.get("wall_clock_s")
    took = "" if wall is None else f" {wall:.0f} s"
    return f"{tc.experiment}/{tc.run}:{moved}{took}".rstrip(",")


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


def method_seeds(table, method: str) -> tuple:
    """The seeds `method` trains on in a table: table.headline_seeds for the methods of its
    headline comparisons (table.headline) where set, else table.seeds."""
    headline = tuple(table.get("headline_seeds", ()))
    if headline and method in tuple(table.get("headline", ())):
        return headline
    return tuple(table.seeds)


def write_comparisons(results: Dict[str, List[Dict[str, Any]]], comparisons, key: str,
                      paper: Mapping[str, float], path_stem: str, log: bool = False) -> str:
    """Markdown and JSON of a table's pre-registered comparisons (config.table.comparisons:
    (method, baseline) pairs, or (method, baseline, claim) where the paper claims a sign
    (+1 / -1) without a gap: paired.Comparison) on the summary key `key` (a "final/..."
    held-out metric): per comparison the mean paired difference over the seeds both
    methods ran, its 95 % t interval (and the bootstrap one where n < 10), n, the verdict
    and the seeds the paper's gap would need at the measured SD (asct_jax.infra.paired);
    the paper's gap is paper[method] - paper[baseline] where it gives both. Then each
    method against its own start (the "initial/..." value of the same run): whether
    training moved the actor.
    results: run_grid's, {method: [summary per seed]}. log: compare log(value) (a cost
    ratio: the difference of logs is the log of the ratio; `paper` then holds the
    paper's values, their log ratio is its gap)."""
    from asct_jax.infra.paired import COLUMNS, Comparison, comparison_rows

    f = math.log if log else float
    start = key.replace("final/", "initial/", 1)
    values, moved, seeds = {}, [], {}
    compared = {m for pair in comparisons for m in pair[:2]}
    for m, runs in results.items():
        seeds[m] = [r["seed"] for r in runs]
        if log and (m not in compared or any((r.get(key) or 0) <= 0 for r in runs)):
            continue    # a log needs positive values (PPO spends no auxiliary tokens)
        if all(r.get(key) is not None for r in runs):
            values[m] = {r["seed"]: f(r[key]) for r in runs}
        if start != key and all(r.get(key) is not None and r.get(start) is not None
                                for r in runs):
            values[f"{m} (start)"] = {r["seed"]: f(r[start]) for r in runs}
            moved.append(Comparison(m, f"{m} (start)"))
    pairs = [Comparison(m, b, f(paper[m]) - f(paper[b]) if m in paper and b in paper
                        else None, *claim) for m, b, *claim in comparisons]
    rows, moved_rows = comparison_rows(values, pairs), comparison_rows(values, moved)
    lists = {tuple(v) for v in seeds.values()}
    head = ("Paired over seeds " + ", ".join(map(str, next(iter(lists), ())))
            if len(lists) == 1 else "Paired over the seeds both methods ran (" + "; ".join(
                f"{m}: {', '.join(map(str, v))}" for m, v in seeds.items()) + ")")
    all_seeds = {s for v in seeds.values() for s in v}
    if TUNING_SEED in all_seeds:
        head += f"; seed {TUNING_SEED} is the tuning seed: not a reporting comparison"
    if log:
        head = f"log({key}): a difference is the log of the cost ratio. " + head
    table = head + ".\n\n" + (markdown_table(rows, COLUMNS) if rows
                              else "(no comparison has two seeds of both methods)")
    if moved_rows:
        table += (f"\n\nEach method against its own start ({start}, the same runs):\n\n"
                  + markdown_table(moved_rows, COLUMNS[:4] + COLUMNS[5:7]))
    atomic_write_text(path_stem + ".md", table + "\n")
    atomic_write_json(path_stem + ".json", {"key": key, "seeds": seeds, "values": values,
                                            "rows": rows, "moved": moved_rows})
    return table


# The loss terms whose gradient norms ppo.term_grad_norms logs apart (metrics.jsonl's
# train/grad_norm/<term>, asct_jax.rl.train_step `loss_terms`): aux is FACTOR's / SERL's
# teacher KL, kl_ref the KL to the initial policy.
LOSS_TERMS = ("policy", "kl_ref", "aux", "entropy", "value")
NORM_STEPS = (1, 5, 10)          # the steps whose policy-gradient norm is shown, then the last
POLICY_STEP_COLUMNS = ("effective policy step", "policy steps without KL",
                       "policy grad norm (mean)", "policy grad norm @1 / 5 / 10 / last",
                       "dominant term (share of steps)")


def train_records(path: str) -> List[Dict[str, Any]]:
    """A metrics.jsonl's training records (those with train/grad_norm), one per step in
    step order: of a step logged twice (a resumed run logs the steps after its checkpoint
    again) the last, the one that trained the run's parameters."""
    from asct_jax.infra.run_logger import read_jsonl

    by_step = {r.get("step"): r for r in read_jsonl(path) if "train/grad_norm" in r}
    return [by_step[k] for k in sorted(by_step, key=lambda k: (k is None, k or 0))]


def update_lrs(lr: float, warmup: int, n: int):
    """[n] the learning rate of a run's optimiser updates 0 .. n-1 (the optimiser's count):
    optax.linear_schedule(lr / w, lr, w), w = max(warmup, 1) (train_step.make_optimizer):
        lr(u) = lr / w + (lr - lr / w) * min(u, w) / w."""
    import numpy as np

    w = max(int(warmup), 1)
    u = np.arange(n, dtype=np.float64)
    return lr / w + (lr - lr / w) * np.minimum(u, w) / w


def run_policy_steps(run_dir: str) -> Optional[Dict[str, Any]]:
    """The policy-step liveness of one run (its metrics.jsonl and config.json; None
    without training records or config.json).

    g_t: the policy-gradient norm at step t (train/grad_norm/policy where the run logged
    each loss term's norm, ppo.term_grad_norms; else train/grad_norm, every term's).
    n_t: the optimiser updates step t made (train/updates, 1 if not logged), U_t the
    updates before it, counted from the run's first (a warm start's optimiser is fresh).
    lr(u): the method's rate at update u, lr_m = ppo.lr x ppo.lr_scale with the linear
    warm-up of ppo.warmup_steps updates (`update_lrs`). Then

        effective policy step   S = sum_t g_t / rms(g) * sum_{u = U_t}^{U_t + n_t - 1} lr(u),
        rms(g) = sqrt(mean_t g_t^2)   (over the run's steps),

    and "policy steps without KL" S_pol, the same sum over the steps where the policy term
    has the largest gradient norm among the logged terms (LOSS_TERMS; None if the run did
    not log them; a step where every term's norm is 0 is dominated by none). Adam divides
    a gradient by its running RMS, so an update moves the parameters by about
    lr(u) x g / rms(g): S is the run's summed step length in units of the lr, with
    g / rms(g) = 1 at a constant norm (S = lr_m x the run's updates).
    Approximation: each of step t's n_t updates is given the step's logged norm g_t (the
    mean over its updates, before the clip at ppo.max_grad_norm), and rms(g) is the run's,
    not Adam's running second moment (b2 = 0.999: over a short run, about the mean so far;
    and Adam's is the whole gradient's, so where a KL term dominates, S computed on the
    policy term's norm overstates the policy's share of the step).

    Returns {"policy_step": S, "policy_step_no_kl": S_pol or None, "steps": [T] step
    indices, "g": [T] g_t, "dominant": {term: share of steps where its norm is largest}
    or None}."""
    import numpy as np

    recs = train_records(os.path.join(run_dir, "metrics.jsonl"))
    cfg_path = os.path.join(run_dir, "config.json")
    if not recs or not os.path.exists(cfg_path):
        return None
    with open(cfg_path) as f:
        ppo = json.load(f).get("ppo", {})
    lr = float(ppo["lr"]) * float(ppo.get("lr_scale", 1.0))
    key = ("train/grad_norm/policy" if all("train/grad_norm/policy" in r for r in recs)
           else "train/grad_norm")
    g = np.array([r[key] for r in recs], dtype=np.float64)                       # [T]
    n = np.array([int(round(r.get("train/updates", 1.0))) for r in recs])        # [T]
    rates = update_lrs(lr, int(ppo.get("warmup_steps", 0)), int(n.sum()))        # [sum n]
    start = np.concatenate([[0], np.cumsum(n)[:-1]])                              # U_t
    lr_t = np.array([rates[a:a + k].sum() for a, k in zip(start, n)])   # sum_u lr(u), [T]
    rms = float(np.sqrt(np.mean(g ** 2)))
    per_step = lr_t * g / rms if rms > 0 else np.zeros_like(g)          # S's terms, [T]
    terms = [t for t in LOSS_TERMS if all(f"train/grad_norm/{t}" in r for r in recs)]
    dominant = no_kl = None
    if terms:
        norms = np.array([[r[f"train/grad_norm/{t}"] for t in terms] for r in recs])
        # ties go to the earlier term of LOSS_TERMS; a step whose every norm is 0 (no
        # gradient at all) is dominated by none (-1)
        top = np.where(norms.max(axis=1) > 0, np.argmax(norms, axis=1), -1)
        dominant = {t: float(np.mean(top == i)) for i, t in enumerate(terms)}
        no_kl = (float(per_step[top == terms.index("policy")].sum())
                 if "policy" in terms else 0.0)
    return {"policy_step": float(per_step.sum()), "policy_step_no_kl": no_kl,
            "steps": [r.get("step") for r in recs], "g": g.tolist(), "dominant": dominant}


def policy_step_cells(runs: Sequence[Mapping[str, Any]]) -> List[str]:
    """The POLICY_STEP_COLUMNS cells of a method, means over its runs (run_policy_steps'
    dicts, one per seed): S, S_pol ("-" unless every run logged each term's norm), the
    mean g_t over the steps, g_t at NORM_STEPS and each run's last step ("-" where no
    run reached it), and each term's share of the steps where its norm is the largest
    (terms with a share above 0; "-" without per-term norms)."""
    import numpy as np

    def fmt(v):
        return "-" if v is None else f"{v:.3g}"

    no_kl = [r["policy_step_no_kl"] for r in runs]
    at = [[gv for r in runs for s, gv in zip(r["steps"], r["g"]) if s == k]
          for k in NORM_STEPS] + [[r["g"][-1] for r in runs]]
    dom = [r["dominant"] for r in runs]
    if all(d is not None for d in dom):
        terms = [t for t in LOSS_TERMS if any(t in d for d in dom)]
        shares = {t: np.mean([d.get(t, 0.0) for d in dom]) for t in terms}
        dom_cell = " / ".join(f"{t} {v:.2f}" for t, v in shares.items() if v > 0)
    else:
        dom_cell = "-"
    return [fmt(np.mean([r["policy_step"] for r in runs])),
            fmt(None if None in no_kl else float(np.mean(no_kl))),
            f"{np.mean([np.mean(r['g']) for r in runs]):.3f}",
            " / ".join(f"{np.mean(v):.3f}" if v else "-" for v in at),
            dom_cell]


def liveness_table(out_dir: str, names: Sequence[str], seeds: Sequence[int],
                   metrics: Mapping[str, str]) -> str:
    """Markdown: that a comparison is live. Per run name (results/<out_dir>/<name>_s<seed>/
    metrics.jsonl): the policy-gradient norm at the first batch (mean over seeds), the
    protocol's optimiser updates per step and share of clipped tokens, then each of
    `metrics` (key -> column) averaged over the steps and seeds ("-" if absent), then the
    policy-step columns (POLICY_STEP_COLUMNS, `run_policy_steps`, `policy_step_cells`:
    the effective policy step, with and without the steps a KL term dominates, the
    policy-gradient norm per step and each loss term's share of the steps it dominates;
    "-" where a run has no config.json)."""
    import numpy as np

    from asct_jax.infra.run_logger import read_jsonl

    metrics = {"train/updates": "updates / step", "train/clip_frac": "clip share",
               **metrics}
    head = ["method", "grad norm @1"] + list(metrics.values()) + list(POLICY_STEP_COLUMNS)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in names:
        dirs = [os.path.join(out_dir, f"{m}_s{s}") for s in seeds]
        paths = [os.path.join(d, "metrics.jsonl") for d in dirs]
        runs = [[r for r in read_jsonl(p) if "train/grad_norm" in r]
                for p in paths if os.path.exists(p)]
        runs = [r for r in runs if r]
        recs = [r for run in runs for r in run]
        if not recs:
            continue
        first = [run[0]["train/grad_norm"] for run in runs]      # each seed's first batch
        cells = [m, f"{np.mean(first):.3f}"]
        for k in metrics:
            v = [r[k] for r in recs if k in r]
            cells.append(f"{np.mean(v):.3f}" if v else "-")
        steps = [run_policy_steps(d) for d in dirs if os.path.exists(d)]
        steps = [s for s in steps if s is not None]
        cells += policy_step_cells(steps) if steps else ["-"] * len(POLICY_STEP_COLUMNS)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
