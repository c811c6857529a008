"""Experiment infrastructure, not RL: config files and overrides (config_cli), orbax
checkpoints and the non-finite guard (checkpoint), run logs and plots (run_logger),
seed tables (tables)."""
