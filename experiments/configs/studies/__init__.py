"""The configs of experiments/studies/'s tools: one file per module, the same name."""
