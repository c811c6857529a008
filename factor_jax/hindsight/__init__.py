"""FACTOR's and SERL's hindsight teacher, and the warm-start phase that teaches it.

One concern per module:

  teacher_prompt   the teacher's prompt (x_t and o_{t+1} in one message, SERL's wording):
                   teacher_prefix, the one FACTOR's and SERL's credit read
                   (factor_jax.teacher) and the phase teaches; TEACHER_PROMPTS.
  progress         the environment's judgement of a step: as good as the scripted
                   expert's own (step_progress, candidate_progress).
  counterfactual   the counterfactual rows (warm_start.phase "counterfactual").
  generate         the rows for a generating actor (actor.chooser "generate").
  warm_start       the phase itself (warm_start.phase, HINDSIGHT): its rows, their
                   loss, the jitted update and `hindsight_phase`, a
                   asct_jax.rl.warm_start.WarmStartPhase the experiment edge passes to
                   the substrate's warm start (experiments/harness/warm_start.py).

The environments expose only the neutral feedback frame (asct_jax.envs.prompt:
FeedbackFrame, PromptTokens.feedback_frame / appended_frame, render_feedback); which
frame the teacher reads, and why, is this package's.
"""
