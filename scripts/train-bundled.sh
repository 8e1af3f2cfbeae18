#!/usr/bin/env bash
# Trains the bundled model data/anatomy-moe/ (chapters 9 and 12) with `anatomy train`, then
# asks transformers what it computes on the result (scripts/gen_anatomy_moe_checks.py).
#
#   scripts/train-bundled.sh            # train into target/anatomy-moe, copy into data/
#   PYTHON=/work/peers/py/bin/python    # torch 2.15 + transformers 5.24 + tiktoken
#
# The run is seeded and its arithmetic order fixed: the same command gives the recorded
# losses at every step and the same model file, byte for byte, on any x86-64 CPU with AVX2
# (chapter 12, §12.16; tests/bundled_model.rs reruns the first steps).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-target/anatomy-moe}
DEST=data/anatomy-moe
PYTHON=${PYTHON:-/work/peers/py/bin/python}
ARGS=(--steps 1000 --batch-size 8 --seq-len 128 --warmup 50 --lr 5e-3
      --eval-every 100 --eval-batches 8 --checkpoint-every 250 --seed 0 --threads 2)

cargo build --release -q
rm -rf "$OUT"
mkdir -p "$OUT" "$DEST"
start=$(date +%s)
target/release/anatomy train --out "$OUT" "${ARGS[@]}" --quiet --json > "$OUT.summary.json"
wall=$(( $(date +%s) - start ))

cp "$OUT/config.json" "$OUT/model.safetensors" "$OUT/train_log.jsonl" "$DEST/"
# The options the run used, as the trainer saved them (the reproduction test reads them).
python3 -c 'import json,sys; json.dump(json.load(open(sys.argv[1]))["options"], open(sys.argv[2], "w"), indent=1, sort_keys=True)' \
  "$OUT/trainer_state.json" "$DEST/train_options.json"
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
FLAGS=$(grep -m1 '^flags' /proc/cpuinfo | grep -oE '\b(avx2|fma|f16c|avx512f|avx512_bf16|avx512_vnni|avx_vnni)\b' | sort -u | tr '\n' ' ')
python3 - "$OUT.summary.json" "$DEST/training.json" "$wall" "$CPU" "$FLAGS" "${ARGS[*]}" <<'PY'
import json, sys
summary, dest, wall, cpu, flags, args = sys.argv[1:]
s = json.load(open(summary))
s.pop("out", None)
log = [json.loads(l) for l in open(dest.replace("training.json", "train_log.jsonl"))]
s.update({
    "command": "anatomy train --out DIR " + args,
    "elapsed_s": log[-1]["elapsed_s"],
    "wall_s": int(wall),
    "cpu": cpu,
    "cpu_flags": flags.split(),
    "options": json.load(open(dest.replace("training.json", "train_options.json"))),
})
json.dump(s, open(dest, "w"), indent=1)
open(dest, "a").write("\n")
PY
"$PYTHON" scripts/gen_anatomy_moe_checks.py "$DEST"
echo "trained in ${wall} s; $DEST/training.json"
