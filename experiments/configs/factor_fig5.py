"""FACTOR diagnostics, the paper's Figure 5 (experiments/tables/factor_fig5.py).

    python -m experiments.tables.factor_fig5 --config experiments/configs/factor_fig5.py
    python -m experiments.tables.factor_fig5 --config experiments/configs/factor_fig5.py:quick
    python -m experiments.tables.factor_fig5 --config experiments/configs/factor_fig5.py:smoke
    python -m experiments.tables.factor_fig5 --config experiments/configs/factor_fig5.py:quick_warm

"_warm" (or "warm" for the full scale): training starts from the shared warm start of the
environment (experiments/harness/warm_start.py, results/factor_fig5/warm_start/<env>/), so the
"early" parameters are the warm-started actor's; its run and figure carry "_warm".

The base config (experiments/configs/base.py) with method "factor" on `shop`, plus a
`fig5` block for the diagnostic batch sizes. Training goes to
results/factor_fig5/<train.run>/ and is resumed (reused) when that run already holds the
final checkpoint: delete the run directory, or pass another --config.train.run, to retrain.
"""
import ml_collections

from asct_jax.infra.config_cli import Range
from experiments.configs import base

PERTURB_MODES = ("delete", "swap", "unk")


def get_config(arg: str = ""):
    arg, warm = base.split_arg(arg or "full", ("full", "quick", "smoke"), "factor_fig5")
    quick = arg in ("quick", "smoke")   # smoke: quick with 10 training steps
    c = base.get_config()
    c.method = "factor"
    c.env.name = "shop"
    c.env.size = "small"
    c.train.experiment = "factor_fig5"
    suffix = "_warm" if warm else ""
    c.train.run = (f"train_{arg}" if quick else "train_full") + suffix
    c.train.resume = True          # reuse a finished run of the same name (see above)
    c.train.steps = 60 if not quick else 20 if arg == "quick" else 10
    c.train.eval_every = c.train.steps
    c.train.eval_episodes = 128 if quick else 256
    c.train.checkpoint_every = c.train.steps
    c.train.keep = 1
    if quick:
        c.rollout.num_groups = 4
        c.rollout.group_size = 8

    c.fig5 = ml_collections.ConfigDict()
    # results/factor_fig5/<name>.{png,json}
    c.fig5.name = (f"fig5_{arg}" if quick else "fig5") + suffix
    c.fig5.warm_start = warm       # train from the shared warm start (see above)
    # "<experiment>/<run>" under train.results_dir: diagnose that finished FACTOR run (its
    # config.json's training fields and its last checkpoint) instead of training one;
    # `experiments.reproduce --config.quick` points it at the FACTOR table's shop seed-42 run.
    c.fig5.train_run = ""
    if warm:
        c.ppo.lr = base.WARM_START_LR
    # The warm start's teacher prompt reads the feedback (factor_table.py's; "none": the
    # warm start before issue 38, docs/results/regime.md).
    c.warm_start.phase = "feedback"
    c.fig5.seed = 7                # diagnostic keys: fold_in(key(seed + fig5.seed), ...)
    c.fig5.num_groups = 4 if quick else 8            # diagnostic batch (G = group_size)
    c.fig5.group_size = 8
    c.fig5.mc_rollouts = 8 if quick else 32          # V_MC rollouts per stored state
    c.fig5.perturb_actions = 12 if quick else 48     # actions per credit sign (at most)
    c.fig5.perturb_rollouts = 4 if quick else 16     # rollouts per action and variant
    c.fig5.perturb_modes = PERTURB_MODES             # token replacements, see the script
    c.fig5.min_abs_credit = 1e-3   # |A*_t| below this counts as neither sign
    c.fig5.chunk = 512             # lanes per lax.map chunk for the MC rollouts (memory)
    if arg == "smoke":             # `experiments.reproduce --config.quick`: half the batches
        c.train.eval_episodes = 64
        c.rollout.num_groups = c.fig5.num_groups = 2
        c.fig5.mc_rollouts = 4
        c.fig5.perturb_actions = 6
        c.fig5.perturb_rollouts = 2
    return c


def get_constraints():
    cons = dict(base.get_constraints())
    cons.update({
        "fig5.num_groups": Range(1, None, integer=True),
        "fig5.group_size": Range(1, None, integer=True),
        "fig5.mc_rollouts": Range(1, None, integer=True),
        "fig5.perturb_actions": Range(1, None, integer=True),
        "fig5.perturb_rollouts": Range(1, None, integer=True),
        "fig5.perturb_modes": PERTURB_MODES,
        "fig5.min_abs_credit": Range(0.0, None),
        "fig5.chunk": Range(1, None, integer=True),
    })
    return cons
