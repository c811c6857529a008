"""Benchmarks, not tests: the decoder against transformers (model), the environments
(envs, host_envs), the search against mctx (search), the credit kernels against NumPy and
rlax (credit), the training step (train) and its compilation (compile). Each runs as
`python -m experiments.bench.<name>` and writes JSON under results/bench/; their numbers
are in docs/benchmarks.md.
"""
