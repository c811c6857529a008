"""The configs of experiments/harness/'s tools: one file per module, the same name."""
