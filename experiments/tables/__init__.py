"""The table entry points: each trains a grid of methods x environments x seeds (finished
runs reused, experiments.harness.runner) and writes a results page's table to
results/<experiment>/: the ASCT table on ragspace (asct_ragspace), the FACTOR table and its
generating-actor and ASCT+FACTOR variants (factor_table), Figure 5 (factor_fig5; its
panels' numbers and plot: factor_fig5_panels), the substrate baselines (substrate_table),
the real games (scienceworld_run, textworld_run) and the tuning sweeps behind the tuned
protocol (sweep). Each runs as
`python -m experiments.tables.<name> --config experiments/configs/<config>.py:<arg>`.
"""
