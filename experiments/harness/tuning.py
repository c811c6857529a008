"""Tuning a table's methods on the tuning seed and validation episodes (issue 49): the
grid a sweep trains, how a point is scored, how values and the run length are chosen,
and how a table applies the chosen values (`table.protocol = "tuned"`).

A sweep (experiments.tables.sweep) trains, for one method of a table on one environment, at
the tuning seed (base.TUNING_SEED) with held-out episodes from the validation stream
(train.eval_split "validation", never the reported test episodes):
  stage 1, the learning rate: ppo.lr = the table's rate x each of sweep.lr_factors (the
           method's own lr_scale kept, so FACTOR's grid sits at its authors' ratio);
           If the best rate is at an edge of the grid, the grid grows by one rate past
           that edge and the choice is made again, at most sweep.edge_extensions times
           (`beyond_edge`; amendment 2 of the pre-registration);
  stage 2, where the method has one, its teacher weight (STAGE_TWO: FACTOR's lambda_0 of
           the teacher KL, factor.kl_coef, its authors' 1 and 0.1, 0; SERL's mixing weight
           serl.lam0, its authors' 0.5 and 0.05, 0) at the stage-1 rate.
Each point runs sweep.steps steps (the run-length cap) with an evaluation every
sweep.eval_every, and scores the mean validation metric over the last quarter of its
evaluations (`score`: robust to one noisy evaluation; the end of the curve, not its
peak). The chosen point is the best score; a tie keeps the lower rate.

Run length (`run_length`): the smallest multiple of eval_every, at least sweep.min_steps,
from which on the best method's validation curve has flattened: the OLS slope over the
last quarter of the evaluations up to it (at least 6) has a 95 % t interval covering 0
(asct_jax.infra.curves.plateau), there and at every longer length; the cap if the curve
is still moving at the cap. Every method of a table gets it.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from asct_jax.infra.checks import ConfigError

# A method's second stage: (field, values), the authors' value first. Ablations and the
# compute-matched baseline take their parent's tuned values (TUNED_FROM), not their own.
STAGE_TWO: Dict[str, Tuple[str, Tuple[float, ...]]] = {
    "factor": ("factor.kl_coef", (1.0, 0.1, 0.0)),
    "serl": ("serl.lam0", (0.5, 0.05, 0.0)),
}
TUNED_FROM = {"factor_no_tac": "factor", "factor_no_hta": "factor", "factor_no_apm": "factor",
              "grpo_extended": "grpo"}
PROTOCOLS = ("authors", "tuned")   # table.protocol


def point_name(env: str, method: str, overrides: Mapping[str, Any]) -> str:
    """The run name of a grid point: <env>_<method>_<field>=<value>..., fields in order."""
    parts = [f"{k.rpartition('.')[2]}{v:g}" for k, v in overrides.items()]
    return "_".join([env, method] + parts)


def score(steps: Sequence[int], values: Sequence[float], last_fraction: float = 0.25) -> float:
    """Mean of the evaluations at steps >= (1 - last_fraction) x the last step (at least
    the last one): a point's validation score."""
    if not steps:
        raise ValueError("no evaluation in the run")
    cut = (1.0 - last_fraction) * steps[-1]
    tail = [v for s, v in zip(steps, values) if s >= cut] or [values[-1]]
    return float(sum(tail) / len(tail))


def choose(points: Mapping[str, Tuple[Mapping[str, Any], float]]) -> str:
    """The name of the best-scoring point ({name: (overrides, score)}); among equal
    scores the one with the lowest ppo.lr (the smaller step), then the first."""
    def key(item):
        name, (over, s) = item
        return (-s, over.get("ppo.lr", 0.0))
    return min(points.items(), key=key)[0]


def run_length(steps: Sequence[int], values: Sequence[float], every: int, min_steps: int,
               cap: int, min_points: int = 6) -> Tuple[int, Dict[str, Any]]:
    """(length, the plateau test at it): the smallest L (a multiple of `every`, min_steps
    <= L <= the run's last evaluation <= cap) whose curve up to L has flattened over its
    last quarter (the slope's 95 % interval covers 0; asct_jax.infra.curves.plateau) and
    stays flat at every longer length the run evaluated; the run's last length if none
    is. The quarter holds at least `min_points` evaluations: with 4 (the last quarter of
    60 steps evaluated every 5) the t interval has 2 degrees of freedom and covered 0 on
    seed 7's GRPO shop curves that rose by +0.04 over their last 40 steps (amendment,
    docs/results/tuned_protocol.md); 6 separates them. "Stays flat" keeps a pause followed
    by a rise from cutting the run."""
    from asct_jax.infra.curves import plateau

    tests = []
    for length in range(max(min_steps, every), cap + 1, every):
        pts = [(x, y) for x, y in zip(steps, values) if x <= length]
        if not pts or pts[-1][0] != length:
            break                           # the run stopped before this length
        tail = pts[-max(min_points, math.ceil(len(pts) / 4)):]   # the last quarter, >= 6
        tests.append((length, plateau([x for x, _ in tail], [y for _, y in tail],
                                      last_fraction=1.0)._asdict()))
    if not tests:
        raise ValueError(f"no evaluation at a multiple of {every} between {min_steps} and {cap}")
    chosen = tests[-1]
    for length, test in reversed(tests):
        if not test["flat"]:
            break
        chosen = (length, test)
    return chosen


def tuned_overrides(table, env: str, method: str) -> Dict[str, Any]:
    """The overrides a table applies to (env, method) under its protocol: {} under
    "authors"; under "tuned" the sweep's chosen values (table.tuned.<env>.<method>, or its
    parent's, TUNED_FROM), the tuned run length (table.tuned_steps: one for the table, or
    {env: steps} where each analogue is its own table) and the options the
    tuned protocol names (table.tuned_options). A one-line ConfigError if a method was
    never tuned."""
    protocol = table.get("protocol", "authors")
    if protocol not in PROTOCOLS:
        raise ConfigError("table.protocol", f"unknown protocol {protocol!r}", ", ".join(PROTOCOLS))
    if protocol == "authors":
        return {}
    source = TUNED_FROM.get(method, method)
    chosen = table.get("tuned", {}).get(env, {}).get(source)
    if chosen is None:
        raise ConfigError(f"table.tuned.{env}.{source}", "not tuned yet (run "
                          "python -m experiments.tables.sweep on this table first)",
                          "the sweep's chosen values")
    steps = table.get("tuned_steps")
    if hasattr(steps, "get"):          # {env: steps}: each analogue's table its own length
        steps = steps.get(env)
    if not steps:
        raise ConfigError("table.tuned_steps", f"the tuned run length of {env} is not chosen "
                          "yet", "the sweep's run length (an int, or {env: int})")
    from experiments.harness.dotted import flatten

    out = tuned_options(table, method)
    out.update(flatten(chosen.to_dict() if hasattr(chosen, "to_dict") else chosen))
    out["train.steps"] = int(steps)
    return out


def tuned_options(table, method: str) -> Dict[str, Any]:
    """{dotted field: value}: the named options the tuned protocol gives `method`'s
    family (table.tuned_options; a sweep trains under them too)."""
    from experiments.harness.dotted import flatten

    options = table.get("tuned_options", {}).get(_family(method))
    return flatten(options.to_dict()) if options is not None else {}


def _family(method: str) -> str:
    """The options group of a method: "factor" for FACTOR and its ablations, else its
    name."""
    return "factor" if method == "factor" or method.startswith("factor_") else method


def lr_grid(base_lr: float, factors: Sequence[float]) -> List[float]:
    """ppo.lr values: the table's rate times each factor (rounded to 3 significant
    digits, so a name and a stored config agree)."""
    return [float(f"{base_lr * f:.3g}") for f in factors]


def beyond_edge(grid: Sequence[float], chosen: float) -> Optional[float]:
    """The next rate of the log grid past the edge the chosen rate sits at (the grid's
    neighbour ratio below its lowest or above its highest rate), or None when the chosen
    rate is interior: a best point at an edge says the optimum may lie outside the grid
    (amendment, docs/results/tuned_protocol.md)."""
    g = sorted(grid)
    if len(g) < 2 or chosen not in (g[0], g[-1]):
        return None
    ratio = g[1] / g[0] if chosen == g[0] else g[-1] / g[-2]
    return float(f"{chosen / ratio:.3g}") if chosen == g[0] else float(f"{chosen * ratio:.3g}")


def log_spaced(values: Sequence[float]) -> bool:
    """The grid's factors form a log grid (ratios between neighbours all equal)."""
    if len(values) < 2 or any(v <= 0 for v in values):
        return False
    r = [math.log(b / a) for a, b in zip(values, values[1:])]
    return max(r) - min(r) < 1e-9 and r[0] > 0


def curve_of(records: Sequence[Mapping[str, Any]], key: str
             ) -> Tuple[List[int], List[float]]:
    """(steps, values) of the records (metrics.jsonl) that hold `key`."""
    pts = [(int(r["step"]), float(r[key])) for r in records if key in r]
    return [s for s, _ in pts], [v for _, v in pts]


def table_row(name: str, overrides: Mapping[str, Any], s: float, final: Optional[float],
              lr_scale: float) -> Dict[str, Any]:
    """One line of a sweep's table."""
    lr = overrides.get("ppo.lr")
    row = {"point": name, **{k: f"{v:g}" for k, v in overrides.items()},
           "validation score": f"{s:.4f}",
           "final validation": "-" if final is None else f"{final:.4f}"}
    if lr is not None:
        row["method lr"] = f"{lr * lr_scale:.3g}"
    return row
