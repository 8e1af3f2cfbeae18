#!/usr/bin/env bash
# `anatomy serve` end to end (scripts/check_serve.py): the official `openai` client against
# the bundled MoE (and SmolLM2 when target/real-models has it), the chat page in headless
# Chromium, and a bounded load run. Needs python3 and chromium; the client goes into its own
# venv under target/peers/openai, pinned. Exits non-zero on any failed check.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OPENAI_VERSION=3.60.0
venv=target/peers/openai
if ! "$venv/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian's python3 ships venv without ensurepip; CI may install it as root.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get install -y -q python3-venv >/dev/null
      python3 -m venv "$venv"
    else
      echo "check-serve: python3 -m venv failed (install python3-venv)" >&2; exit 1
    fi
  fi
  "$venv/bin/pip" install -q "openai==$OPENAI_VERSION"
fi

cargo build --release -q --bin anatomy
chromium=$(command -v chromium || command -v chromium-browser || true)
timeout 180 "$venv/bin/python" scripts/check_serve.py --anatomy target/release/anatomy \
  ${chromium:+--chromium "$chromium"} "$@"
