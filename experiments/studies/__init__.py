"""Studies: measurements that explain a table rather than make one. The regime an actor
trains in (asct_regime), a run's repeatability (asct_repeatability), how well a fresh
critic fits a replay (critic_fit), the ragspace analogue's difficulty (ragspace_landscape),
Figure 5's measures over diagnostic samples (fig5_samples), where FACTOR's token weights
put the credit (factor_allocation) and a pretrained model's zero-shot success (zero_shot).
Each runs as `python -m experiments.studies.<name>`.
"""
