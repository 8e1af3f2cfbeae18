#!/usr/bin/env bash
# Speed on the real models (SmolLM2-135M-Instruct Q4_1, Gemma 3 270M Q4_K_M), ours against
# llama.cpp on the same files: scripts/bench-peers.sh's interleaved pairs (ours, llama.cpp,
# ours, ...), prefill 128 and 512 and 32 decode steps after 128, at 2 threads and 1, each
# figure the median over REPS pairs, the load average recorded beside every pair.
#
#   scripts/get-real-models.sh   # once
#   scripts/bench-real.sh
#
# llama.cpp: PEERS/llama-noamx when it is there (`LLAMA_NOAMX=1 scripts/setup-peers.sh`:
# built without AMX, so its repacked weight layouts, its fastest CPU path, work); else the
# default build, with weight repacking off (scripts/bench_real_norepack/sitecustomize.py)
# only on a CPU with AMX, where its AMX matmul crashes. Env: REPS (3), THREAD_LIST ("2 1"),
# OUT (target/bench-real), LLAMA_PY (a llama-cpp-python venv's python; repacking stays on).
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=target/real-models
OUT=${OUT:-target/bench-real}
mkdir -p "$OUT/peers/models"
for pair in smollm2-q4_1:smollm2-135m-instruct-q4_1 gemma3-q4_k_m:gemma3-270m-q4_k_m; do
    row=${pair%%:*} file=$MODELS/${pair#*:}.gguf
    [ -f "$file" ] || { echo "bench-real: no $file (scripts/get-real-models.sh)" >&2; exit 2; }
    ln -sfn "$PWD/$file" "$OUT/peers/models/$row.gguf"
done
NOREPACK=
if [ -z "${LLAMA_PY:-}" ]; then
    if [ -x target/peers/llama-noamx/bin/python ]; then
        LLAMA_PY=$PWD/target/peers/llama-noamx/bin/python
    else
        LLAMA_PY=$PWD/target/peers/llama/bin/python
        # Only a CPU with AMX needs repacking off; elsewhere it is llama.cpp's fastest path.
        if grep -qw amx_tile /proc/cpuinfo; then NOREPACK=$PWD/scripts/bench_real_norepack; fi
    fi
fi
PYTHONPATH=$NOREPACK${PYTHONPATH:+:$PYTHONPATH} \
PEERS=$PWD/$OUT/peers LLAMA_PY=$LLAMA_PY \
ROWS=${ROWS:-smollm2-q4_1 gemma3-q4_k_m} OUT=$OUT \
    scripts/bench-peers.sh
