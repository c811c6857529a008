"""The configs of experiments/checks/'s tools: one file per module, the same name."""
