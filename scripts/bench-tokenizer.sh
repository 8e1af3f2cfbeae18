#!/usr/bin/env bash
# Encoding benchmark: ours vs tiktoken on the same mixed corpus, in one run.
# Usage: bash scripts/bench-tokenizer.sh [--mb 4] [--threads 2] [--repeats 3]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-/work/pyenv/bin/python}"
cargo build --quiet --release --example tokenizer_bench
exec "$PY" scripts/bench-tokenizer.py "$@"
