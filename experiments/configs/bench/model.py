"""The options of experiments/bench/model.py; the arg picks the mode.

    python -m experiments.bench.model "--config.models=('tiny', 'smollm2-135m')" \
        "--config.batch_sizes=(1, 4)"
    python -m experiments.bench.model --config experiments/configs/bench/model.py:train_pass
    python -m experiments.bench.model --config experiments/configs/bench/model.py:rollout

"" generate / score; "train_pass" the training pass (train_pass True); "rollout"
generation at rollout shapes (rollout True, with that mode's defaults: models
smollm2-135m, batch_sizes (8, 32), prompt_len 256, new_tokens 64, repeats 2). Fields:
models, batch_sizes (tuples), prompt_len, new_tokens, cont_len, repeats, no_torch,
policy_scoring (also time the policy's constrained candidate scoring), torch_threads
(torch intra-op threads; 0: torch's default, the cores with train_pass / rollout),
train_pass, train_shape (B, S), policy_shape (N, O, A, K: the policy scoring training
pass), out ("": results/bench/model[_train][_rollout].json), rollout, check_rows (rows of
the greedy cross-check, rollout).
"""
import ml_collections

from asct_jax.infra.checks import Range

MODES = ("", "train_pass", "rollout")


def get_config(arg: str = ""):
    if arg not in MODES:
        raise ValueError(f"bench model config arg must be one of {MODES}, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.models = ("tiny", "smollm2-135m")
    c.batch_sizes = (1, 4)
    c.prompt_len = 32
    c.new_tokens = 32
    c.cont_len = 16
    c.repeats = 3
    c.no_torch = False
    c.policy_scoring = False
    c.torch_threads = 0
    c.train_pass = arg == "train_pass"
    c.train_shape = (8, 128)
    c.policy_shape = (8, 112, 16, 8)
    c.out = ""
    c.rollout = arg == "rollout"
    c.check_rows = 4
    if arg == "rollout":   # the rollout mode's own defaults
        c.models = ("smollm2-135m",)
        c.batch_sizes = (8, 32)
        c.prompt_len = 256
        c.new_tokens = 64
        c.repeats = 2
    return c


def get_constraints():
    return {"repeats": Range(lo=1, integer=True)}
