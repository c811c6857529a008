"""The FACTOR table with the generating actor (issue 23): the actor writes
"<think>...</think><action>...</action>", the action is projected onto the admissible set
(asct_jax.rl.generation), an invalid step is penalised. factor_table.py's scales and
driver; its own experiment folders and the methods of the paper's comparison.

    python -m experiments.tables.factor_table --config experiments/configs/factor_generate.py:quick_warm
    python -m experiments.tables.factor_table --config experiments/configs/factor_generate.py:smoke_warm
    python -m experiments.tables.factor_table --config experiments/configs/factor_generate.py:asct_quick_warm

"asct_<scale>": ASCT+FACTOR beside ASCT-AgentUCT where "where" has several tokens to choose
among (issue 39; on ragspace every action is one token, so the two are one run): the same
table, its own experiment folder, GRPO and FACTOR on the same seeds (a finished run of the
same config is reused, e.g. copied from the generate table's folder).

Only the warm scales are meaningful: from scratch the tiny actor writes no valid action
(invalid rate 1.0 at random init), so every reward is the penalty.
"""
from experiments.configs import base, factor_table

METHODS = ("grpo", "serl", "grpo_extended", "factor", "factor_no_tac", "factor_no_hta",
           "factor_no_apm", "gigpo")   # the FACTOR table's, all three ablations (issue 39)
ASCT_METHODS = ("grpo", "factor", "asct_agentuct", "asct_factor")
# Pre-registered (docs/results/asct_decision.md): "where" on top of the searched credit,
# then each searched row against the same learner's non-searched counterpart.
ASCT_COMPARISONS = (("asct_factor", "asct_agentuct"), ("asct_agentuct", "grpo"),
                    ("asct_factor", "factor"))


# The tuned protocol's values for this table (experiments.tables.sweep on
# factor_generate.py:quick_warm, seed 7, validation; factor_table.py's TUNED explains).
TUNED = {}
TUNED_STEPS = 0
TUNED_OPTIONS = factor_table.TUNED_OPTIONS


def get_config(arg: str = "quick_warm"):
    asct = arg.startswith("asct_")
    c = factor_table.get_config(arg[len("asct_"):] if asct else arg)
    c.actor.chooser = "generate"
    c.train.experiment = c.train.experiment.replace("factor_table", "factor_generate")
    c.table.methods = METHODS
    # Seeds: factor_table's (5 reporting seeds, 10 for GRPO / SERL / FACTOR; 2 at smoke);
    # shop only (the paper's generating setting), 128 held-out episodes as before (each
    # generates its turns; not raised to the candidate table's 512 yet).
    c.table.envs = ("shop",)
    c.train.eval_episodes = min(c.train.eval_episodes, 128)
    # Checkpoints every 5 steps: on 2 cores the quick table spans sessions and its runs
    # resume from them (the base config's 20 saved only at the end).
    c.train.checkpoint_every = 5
    # SFT steps of the generating actor's warm start (tuned on warm_start.seed 7 for shop:
    # 300 -> held-out success 0.07 and invalid rate 0.46, 1000 -> 0.31 and 0.28; the
    # candidate-scoring actor's 100 steps give 0.35): copying an admissible action out of
    # the prompt takes the tiny actor ten times the steps. Household and science: not
    # tuned yet, the same 10x of their candidate-mode steps.
    c.warm_start.sft_steps = dict(c.warm_start.sft_steps,
                                  household=750, shop=1000, science=300)
    # The teacher prompt reads the feedback (factor_table's "feedback", the generating
    # actor's rows: factor_jax/hindsight/generate.py; docs/results/regime.md).
    c.warm_start.phase = "feedback"
    base.set_tuned(c, TUNED, TUNED_STEPS, TUNED_OPTIONS)
    if c.table.protocol == "tuned":
        # Its warm start writes the scripted expert's sub-goal inside <think>, so every
        # method trains on reasoning tokens (docs/results/tuned_protocol.md).
        c.warm_start.reasoning = "subgoal"
    if asct:
        c.train.experiment = c.train.experiment.replace("factor_generate", "factor_generate_asct")
        c.table.methods = ASCT_METHODS
        c.table.comparisons = ASCT_COMPARISONS
        c.table.headline = ()      # every method on the table's seeds (5 at quick)
    return c


def get_constraints():
    return factor_table.get_constraints()

