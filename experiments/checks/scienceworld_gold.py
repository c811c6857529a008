"""ScienceWorld's gold paths in admissible spelling, and the share of their steps a
candidate rule keeps (the ceiling of a candidate-scoring actor that follows them).

    python -m experiments.checks.scienceworld_gold \
        --config.tasks=find-non-living-thing,find-plant --config.variations=5 \
        --config.split=train --config.k=32,64,128 --config.out=results/scienceworld/gold.json

Per task: gold steps, steps after mapping (asct_jax.envs.external.scienceworld_gold: no-op
steps dropped, respelled, unmatched, dropped after the end), whether the mapped path wins,
the valid commands per state (median, max), and per K the share of mapped gold steps
VerbQuotaRule(K) keeps and the share of paths it keeps whole. The gold path is one
solution: where a task accepts several objects (any non-living thing), the rule may drop
the gold one and keep another that also solves it, so the shares are lower bounds.
"""
from __future__ import annotations

import collections
import time

import numpy as np

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.run_logger import atomic_write_json

CONFIG = "experiments/configs/checks/scienceworld_gold.py"


def measure(tasks, variations: int, split: str, ks, seed: int = 0, simplification="easy"):
    from asct_jax.envs.external.command_rules import VerbQuotaRule
    from asct_jax.envs.external.scienceworld_env import ScienceWorldEnv
    from asct_jax.envs.external.scienceworld_gold import admissible_gold_path
    from asct_jax.rl.host_text import task_text

    rules = {int(k): VerbQuotaRule(int(k), seed) for k in ks}
    out = {}
    for task in tasks:
        env = ScienceWorldEnv(task, split=split, num_variations=variations, max_turns=100,
                              simplification=simplification)
        t0 = time.time()
        rows = collections.defaultdict(list)
        try:
            for s in range(len(env.games)):
                g = admissible_gold_path(env, s)
                state, _ = env.reset(s)
                kept = {k: 0 for k in rules}
                for c in g.commands:
                    legal = env.legal_actions(state)
                    rows["valid"].append(len(legal))
                    for k, rule in rules.items():
                        kept[k] += c in rule(legal, task_text(state), state.game, state.turn)
                    state, _ = env.step(state, c)
                for f in ("noop", "respelled", "unmatched", "after_done"):
                    rows[f].append(getattr(g, f))
                rows["gold"].append(len(g.gold))
                rows["mapped"].append(len(g.commands))
                rows["won"].append(g.won)
                for k in rules:
                    rows[f"kept{k}"].append(kept[k])
                    rows[f"whole{k}"].append(kept[k] == len(g.commands))
        finally:
            env.close()
        n = len(rows["gold"])
        steps = max(sum(rows["mapped"]), 1)
        out[task] = {
            "variations": n, "gold_steps": float(np.mean(rows["gold"])),
            "mapped_steps": float(np.mean(rows["mapped"])),
            **{f: int(sum(rows[f])) for f in ("noop", "respelled", "unmatched", "after_done")},
            "mapped_wins": float(np.mean(rows["won"])),
            "valid_median": float(np.median(rows["valid"])), "valid_max": int(max(rows["valid"])),
            **{f"kept_share@{k}": sum(rows[f"kept{k}"]) / steps for k in rules},
            **{f"whole_paths@{k}": float(np.mean(rows[f"whole{k}"])) for k in rules},
            "seconds": time.time() - t0,
        }
    return out


def markdown(res, ks) -> str:
    head = ("| task | variations | gold steps | mapped | no-op / respelled / unmatched / after end "
            "| mapped wins | valid (median / max) | "
            + " | ".join(f"kept @K={k} (steps / whole paths)" for k in ks) + " |")
    lines = [head, "|" + "---|" * (6 + len(ks))]
    for task, r in res.items():
        lines.append(
            f"| {task} | {r['variations']} | {r['gold_steps']:.1f} | {r['mapped_steps']:.1f} | "
            f"{r['noop']} / {r['respelled']} / {r['unmatched']} / {r['after_done']} | "
            f"{r['mapped_wins']:.2f} | {r['valid_median']:.0f} / {r['valid_max']} | "
            + " | ".join(f"{r[f'kept_share@{k}']:.2f} / {r[f'whole_paths@{k}']:.2f}"
                         for k in ks) + " |")
    return "\n".join(lines)


def main(a):
    """Measures the tasks of `a` (experiments/configs/checks/scienceworld_gold.py)."""
    from experiments.configs.scienceworld import task_names

    tasks = a.tasks.split(",")
    unknown = [t for t in tasks if t not in task_names()]
    if unknown:
        raise ConfigError("tasks", f"{', '.join(unknown)} not a ScienceWorld task",
                          ", ".join(task_names()))
    try:
        ks = [int(k) for k in a.k.split(",")]
    except ValueError:
        raise ConfigError("k", f"{a.k!r} is not comma-separated ints", "e.g. 32,64,128") from None
    if min(ks) < 1:
        raise ConfigError("k", f"{a.k!r}: every K must be >= 1", "ints >= 1")
    res = measure(tasks, a.variations, a.split, ks, a.seed)
    atomic_write_json(a.out, res)
    print(markdown(res, ks))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
