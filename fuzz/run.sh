#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 300), one at a time, one process, and
# prints libFuzzer's final figures per target. With cargo-fuzz (`cargo install cargo-fuzz
# --locked`) it builds through it (RUSTC_BOOTSTRAP=1 on stable); without, it passes
# cargo-fuzz's coverage flags to a plain `cargo build` for the host target. -a keeps overflow
# checks and debug assertions on, so a wrapped size is a crash; -s none runs without a
# sanitizer (the crate's only unsafe code is mmap and two fcntl calls), for speed.
#   bash fuzz/run.sh [SECONDS] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:-300}; shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(safetensors_header safetensors_index config_json tiktoken tokenizer_json bpe_roundtrip chat_messages id_list gguf gguf_config quant_blocks)
fi
export RUSTC_BOOTSTRAP=1
host=$(rustc -vV | sed -n 's/^host: //p')
if cargo fuzz --version >/dev/null 2>&1; then
  cargo fuzz build -a -s none >/dev/null 2>&1 || cargo fuzz build -a -s none
else
  # The host target keeps the flags off build scripts, as cargo-fuzz does.
  RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
    cargo build --release --target "$host" $(printf -- '--bin %s ' "${targets[@]}") || exit 1
fi
mkdir -p logs
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  "target/$host/release/$t" "corpus/$t" -artifact_prefix="artifacts/$t/" \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    > "logs/$t.log" 2>&1
  status=$?
  runs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "logs/$t.log" | tail -1)
  crashes=$(ls "artifacts/$t" 2>/dev/null | wc -l)
  echo "$t: exit $status; ${runs:-no final stats}; artifacts $crashes"
done
