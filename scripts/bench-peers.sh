#!/usr/bin/env bash
# Chapter 10's table: ours (`anatomy bench FILE.gguf`) against llama.cpp (llama-cpp-python)
# on the same GGUF files, side by side in one run: interleaved pairs (ours, llama.cpp, ours,
# llama.cpp, ...), at 2 threads and at 1, each figure the median over the pairs with the
# spread of the per-pair ratios.
#
#   scripts/setup-peers.sh      # once: installs the peers, makes the checkpoints and GGUFs
#   scripts/bench-peers.sh
#   BIG=/work/big/qwen3-30b-a3b-q4_k_m.gguf scripts/bench-peers.sh   # + the 48-layer row
#
# Rows: the 4-layer bench checkpoint as PEERS/models/{bf16,q8_0,q4_k_m}.gguf (bf16 from
# llama.cpp's converter, the two others from llama.cpp's quantizer), prefill 128, prefill
# 512 and 32 decode steps after 128 tokens; with BIG=FILE also that file (made by
# `cargo run --release --example gen_random_gguf`), prefill 512 and 16 decode steps after
# 512 tokens. Env: PEERS (target/peers), ROWS ("bf16 q8_0 q4_k_m"; empty for none),
# THREAD_LIST ("2 1"), REPS (3 pairs), OUT (target/bench-peers), TORCH=1 and CANDLE=1 add
# the PyTorch-eager and candle runs of chapter 10's first table (slow; off by default),
# TABLE_ONLY=1 rebuilds OUT/table.md from the JSON already in OUT (runs made in pieces add
# up: each writes its own files). Writes OUT/*.json and OUT/table.md and prints the table.
# AVX2=1 measures both sides' AVX2 paths on a CPU that has AVX-512: ours with
# ANATOMY_NO_AVX512=1 (no AVX-512, VNNI or native bf16 kernel), llama.cpp from
# PEERS/llama-avx2 (setup-peers.sh with LLAMA_AVX2=1: GGML_NATIVE off, AVX2+FMA+F16C only);
# its rows are named ROW-avx2. ROUND=1 runs ours with ANATOMY_BF16_ACTIVATIONS=round
# (activations rounded to bf16 for the native bf16 kernels, as llama.cpp does); its rows
# are named ROW-round.
# Every figure is a wall-clock rate: run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PEERS:-$PWD/target/peers}
PY=${PY:-$PEERS/py/bin/python}
AVX2=${AVX2:-0}
SUFFIX=
OURS_ENV=()
if [ "$AVX2" = 1 ]; then
    SUFFIX=-avx2
    OURS_ENV=(env ANATOMY_NO_AVX512=1)
    LLAMA_PY=${LLAMA_PY:-$PEERS/llama-avx2/bin/python}
fi
if [ "${ROUND:-0}" = 1 ]; then
    SUFFIX=$SUFFIX-round
    OURS_ENV=(env "${OURS_ENV[@]:1}" ANATOMY_BF16_ACTIVATIONS=round)
fi
LLAMA_PY=${LLAMA_PY:-$PEERS/llama/bin/python}
CANDLE_BIN=${CANDLE_BIN:-scripts/candle-bench/target/release/candle-bench}
ROWS=${ROWS-bf16 q8_0 q4_k_m}
THREAD_LIST=${THREAD_LIST:-2 1}
REPS=${REPS:-3}
BIG=${BIG:-}
OUT=${OUT:-target/bench-peers}
mkdir -p "$OUT"
BIN=target/release/anatomy
log() { echo "== bench-peers: $*" >&2; }

# One pair: ours then llama.cpp on FILE at THREADS threads. Ours runs one `anatomy bench`
# per prompt length (it times one prefill and the decode after it); llama.cpp one process
# for all figures. The load average goes beside each.
pair() {
    local row=$1 file=$2 t=$3 rep=$4 big=$5
    local tag=$OUT/$row-t$t-r$rep
    uptime > "$tag-load.txt"
    # Every program starts on a warm page cache. The 48-layer file (18.6 GB on a 23 GB
    # machine) does not stay cached beside llama.cpp's repacked copy of its Q4_K tensors:
    # without this read, our engine would be timed paging the file in from the disk.
    cat "$file" > /dev/null
    log "$row, $t thread(s), pair $rep: ours"
    if [ "$big" = 1 ]; then
        "${OURS_ENV[@]}" "$BIN" bench "$file" --prompt-len 512 --gen 16 --threads "$t" --reps 1 --json > "$tag-ours-512.json"
    else
        "${OURS_ENV[@]}" "$BIN" bench "$file" --prompt-len 128 --gen 32 --threads "$t" --reps 1 --json > "$tag-ours-128.json"
        "${OURS_ENV[@]}" "$BIN" bench "$file" --prompt-len 512 --gen 1 --threads "$t" --reps 1 --json > "$tag-ours-512.json"
    fi
    cat "$file" > /dev/null
    log "$row, $t thread(s), pair $rep: llama.cpp"
    if [ "$big" = 1 ]; then
        "$LLAMA_PY" scripts/bench_llamacpp.py "$file" --prefill 512 --decode-prompt 512 --gen 16 \
            --threads "$t" --reps 1 > "$tag-llama.json"
    else
        "$LLAMA_PY" scripts/bench_llamacpp.py "$file" --prefill 128,512 --decode-prompt 128 --gen 32 \
            --threads "$t" --reps 1 > "$tag-llama.json"
    fi
    uptime >> "$tag-load.txt"
}

run_row() {
    local row=$1 file=$2 big=$3
    [ -f "$file" ] || { log "$row: no file $file (scripts/setup-peers.sh), skipped"; return; }
    for t in $THREAD_LIST; do
        for rep in $(seq 1 "$REPS"); do
            pair "$row" "$file" "$t" "$rep" "$big"
        done
    done
}

if [ "${TABLE_ONLY:-0}" != 1 ]; then
    cargo build --release --quiet --bin anatomy
    [ -x "$LLAMA_PY" ] || { log "no llama-cpp-python at $LLAMA_PY (run scripts/setup-peers.sh)"; exit 2; }
    # A run made in pieces (ROWS=..., BIG=...) keeps the first piece's header and every
    # piece's load averages.
    if [ ! -f "$OUT/machine.txt" ]; then
        {
            echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
            echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"
            echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
                grep -xE 'avx2|avx512f|avx512_vnni|avx512_bf16|avx_vnni|amx_tile|amx_bf16|amx_int8' | tr '\n' ' ')"
        } > "$OUT/machine.txt"
    fi
    echo "start load: $(uptime)" >> "$OUT/machine.txt"
    for row in $ROWS; do
        run_row "$row$SUFFIX" "$PEERS/models/$row.gguf" 0
    done
    [ -n "$BIG" ] && run_row "48-layer-q4_k_m$SUFFIX" "$BIG" 1
    if [ "${TORCH:-0}" = 1 ] && [ -x "$PY" ] && [ -d "$PEERS/models/bf16" ]; then
        log "PyTorch eager (bf16 checkpoint)"
        "$PY" scripts/bench_torch.py "$PEERS/models/bf16" --dtype bfloat16 --threads 2 > "$OUT/torch-bf16.json"
    fi
    if [ "${CANDLE:-0}" = 1 ] && [ -x "$CANDLE_BIN" ] && [ -d "$PEERS/models/bf16" ]; then
        log "candle (bf16 checkpoint)"
        RAYON_NUM_THREADS=2 "$CANDLE_BIN" "$PEERS/models/bf16" --dtype bf16 --reps 1 > "$OUT/candle-bf16.json"
    fi
    echo "end load: $(uptime)" >> "$OUT/machine.txt"
fi

python3 scripts/bench_peers_table.py "$OUT" | tee "$OUT/table.md"
