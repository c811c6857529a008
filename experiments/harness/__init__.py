"""The shared machinery the entry points use: the method registry (registry), the grid of
runs with reuse of finished ones (runner) and the fields that decide whether a stored run
or warm start is reused (stored_fields), dotted config overrides (dotted), the tuned
protocol's choices (tuning), the shared warm starts and the shipped ones (warm_start,
warm_start_artifacts), N local processes for the distributed path (launch_local), the
closing screen of `experiments.reproduce --config.quick` (quick_summary), learning curves
(curves) and the offline TextWorld games (make_textworld_games).
"""
