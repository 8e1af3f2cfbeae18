#!/usr/bin/env bash
# Chapter 10's table: ours (`anatomy bench`), PyTorch eager (transformers), llama.cpp
# (llama-cpp-python) and candle (candle-transformers) on the same checkpoints, one after
# the other in the same run, on the same threads.
#
#   scripts/setup-peers.sh      # once: installs the peers, makes the checkpoints (PEERS)
#   scripts/bench-peers.sh [BF16_DIR [F32_DIR]]
#
# Defaults: PEERS=target/peers, BF16_DIR=$PEERS/models/bf16, F32_DIR=$PEERS/models/f32, the
# GGUF files beside them (DIR.gguf); THREADS=2; OUT=target/bench-peers; REPS=3 (ours,
# llama.cpp, candle: the median is reported); CANDLE_REPS=1 (candle's CPU path is slow:
# one rep of each figure already takes minutes). A peer whose install is missing is
# skipped with a message and its column left empty. Writes OUT/*.json and OUT/table.md and
# prints the table. Run it on an otherwise idle machine: every figure is a wall-clock rate.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PEERS:-$PWD/target/peers}
BF16_DIR=${1:-$PEERS/models/bf16}
F32_DIR=${2:-$PEERS/models/f32}
PY=${PY:-$PEERS/py/bin/python}
LLAMA_PY=${LLAMA_PY:-$PEERS/llama/bin/python}
CANDLE=${CANDLE:-scripts/candle-bench/target/release/candle-bench}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
CANDLE_REPS=${CANDLE_REPS:-1}
OUT=${OUT:-target/bench-peers}
mkdir -p "$OUT"
cargo build --release --quiet
BIN=target/release/anatomy
[ -x "$PY" ] || { echo "bench-peers: no Python at $PY (run scripts/setup-peers.sh)" >&2; exit 2; }

run_dtype() {
    local dt=$1 dir=$2
    [ -d "$dir" ] || { echo "== $dt: no checkpoint at $dir, skipped" >&2; return; }
    # Read the checkpoint before each program so all start from a warm page cache.
    cat "$dir"/*.safetensors > /dev/null
    echo "== $dt: ours" >&2
    "$BIN" bench "$dir" --prompt-len 128 --gen 32 --threads "$THREADS" --reps "$REPS" --json > "$OUT/ours-$dt-128.json"
    "$BIN" bench "$dir" --prompt-len 512 --gen 1 --threads "$THREADS" --reps "$REPS" --json > "$OUT/ours-$dt-512.json"
    echo "== $dt: pytorch eager" >&2
    cat "$dir"/*.safetensors > /dev/null
    local tdt=bfloat16
    [ "$dt" = f32 ] && tdt=float32
    "$PY" scripts/bench_torch.py "$dir" --dtype "$tdt" --threads "$THREADS" > "$OUT/torch-$dt.json"
    local gguf=${dir%/}.gguf
    rm -f "$OUT/llamacpp-$dt.json" "$OUT/candle-$dt.json"
    if [ -x "$LLAMA_PY" ] && [ -f "$gguf" ]; then
        echo "== $dt: llama.cpp ($gguf)" >&2
        cat "$gguf" > /dev/null
        "$LLAMA_PY" scripts/bench_llamacpp.py "$gguf" --threads "$THREADS" --reps "$REPS" > "$OUT/llamacpp-$dt.json"
    else
        echo "== $dt: llama.cpp skipped (need $LLAMA_PY and $gguf: scripts/setup-peers.sh)" >&2
    fi
    if [ -x "$CANDLE" ]; then
        echo "== $dt: candle" >&2
        cat "$dir"/*.safetensors > /dev/null
        RAYON_NUM_THREADS=$THREADS "$CANDLE" "$dir" --dtype "$dt" --reps "$CANDLE_REPS" > "$OUT/candle-$dt.json"
    else
        echo "== $dt: candle skipped (need $CANDLE: scripts/setup-peers.sh)" >&2
    fi
}

run_dtype bf16 "$BF16_DIR"
run_dtype f32 "$F32_DIR"

"$PY" - "$OUT" <<'PYEOF' | tee "$OUT/table.md"
import json, sys, os, datetime, platform
out = sys.argv[1]

def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None

rows, head = [], None
for dt in ["bf16", "f32"]:
    o128, o512 = load(f"ours-{dt}-128.json"), load(f"ours-{dt}-512.json")
    if not o128:
        continue
    head = head or o128
    peers = [load(f"torch-{dt}.json"), load(f"llamacpp-{dt}.json"), load(f"candle-{dt}.json")]
    def pick(key, sub=None):
        return [p and (p[key][sub] if sub else p[key]) for p in peers]
    rows += [
        (dt, "prefill 128 (tok/s)", o128["prefill_tok_s"], pick("prefill_tok_s", "128"), o128["prefill_ceiling_tok_s"]),
        (dt, "prefill 512 (tok/s)", o512["prefill_tok_s"], pick("prefill_tok_s", "512"), o512["prefill_ceiling_tok_s"]),
        (dt, "decode 32 after 128 (tok/s)", o128["decode_tok_s"], pick("decode_tok_s"), o128["decode_ceiling_tok_s"]),
        (dt, "peak RSS (GB)", o128["peak_rss_bytes"] / 1e9, [v and v / 1e9 for v in pick("peak_rss_bytes")], None),
    ]
m = head["machine"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {cpu}, {m['threads']} threads; "
      f"read {m['mem_read_gb_s']:.1f} GB/s (one thread {m['mem_read_1t_gb_s']:.1f}), triad {m['mem_triad_gb_s']:.1f} GB/s; "
      f"f32 FMA {m['fma_gflop_s']:.0f} GFLOP/s ({m['fma_gflop_s_per_core']:.0f} per core, {m['fma_kernel']}); "
      f"decode reads {head['work']['decode_bytes_per_token']/1e9:.3f} GB/token ({head['weights_dtype']}). "
      "The 4-layer bench model; chapter 10 extrapolates to 48 layers.\n")
print("| weights | figure | ours | PyTorch eager | llama.cpp | candle | ours / PyTorch | ours / llama.cpp | ours / candle | ceiling | ours / ceiling |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for dt, name, ours, peer, ceil in rows:
    vals = " | ".join(f"{v:.2f}" if v else "—" for v in peer)
    ratios = " | ".join(f"{ours / v:.2f}×" if v else "—" for v in peer)
    c = f"{ceil:.1f}" if ceil else "—"
    f = f"{100 * ours / ceil:.0f} %" if ceil else "—"
    print(f"| {dt} | {name} | {ours:.2f} | {vals} | {ratios} | {c} | {f} |")
PYEOF
