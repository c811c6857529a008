"""The configs of experiments/bench/'s tools: one file per module, the same name."""
