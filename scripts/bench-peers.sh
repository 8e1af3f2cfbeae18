#!/usr/bin/env bash
# Chapter 10's table: ours (`anatomy bench`), PyTorch eager (transformers) and llama.cpp
# (llama-cpp-python) on the same checkpoints, one after the other in the same run, on the
# same threads.
#
#   scripts/bench-peers.sh BF16_DIR [F32_DIR]
#
# BF16_DIR / F32_DIR come from scripts/gen_bench_model.py (--dtype bfloat16 / float32).
# Env: PY (default /work/pyenv/bin/python, torch 2.15 + transformers 5.24), THREADS (2),
# OUT (target/bench-peers), LLAMA_PY (default /work/llamavenv/bin/python), GGUF_BF16 /
# GGUF_F32 (default BF16_DIR.gguf / F32_DIR.gguf, i.e. the directory name plus .gguf).
# Writes OUT/*.json and OUT/table.md, prints the table. llama.cpp runs only when LLAMA_PY
# and the dtype's GGUF exist; otherwise the script says so and leaves its column empty.
#
# llama.cpp setup (PyPI only; about 15 minutes on 2 cores, most of it compiling):
#   python3 -m venv /work/llamavenv
#   /work/llamavenv/bin/pip download --no-deps --no-binary llama-cpp-python llama-cpp-python -d SRC
#   tar xzf SRC/llama_cpp_python-*.tar.gz -C SRC        # the sdist vendors llama.cpp
#   CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF \
#     -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
#     CMAKE_BUILD_PARALLEL_LEVEL=2 /work/llamavenv/bin/pip install SRC/llama_cpp_python-*.tar.gz
# (llama-cpp-python 0.3.36 was used. Pass `--no-binary llama-cpp-python`, not `:all:`,
# or pip also compiles cmake and ninja from source.)
# Converting to GGUF: the bench checkpoints have no tokenizer, and the converter needs one
# (it writes the vocabulary into the GGUF). Make Qwen's tokenizer.json from the tiktoken
# vocabulary, put it beside symlinks to the checkpoint, and run the vendored converter with
# the PyTorch environment (it imports torch and transformers; the vendored gguf-py is
# found by the script itself):
#   $PY scripts/make_qwen_tokenizer.py data/qwen.tiktoken TOK
#   mkdir CONV && ln -s "$PWD"/BF16_DIR/* CONV/ && cp TOK/* CONV/
#   $PY SRC/llama_cpp_python-*/vendor/llama.cpp/convert_hf_to_gguf.py CONV \
#     --outtype bf16 --outfile BF16_DIR.gguf                  # and f32 for F32_DIR
# Figures: prefill 128 and 512 tokens, decode 32 tokens after a 128-token prompt.
# Run it on an otherwise idle machine: every figure is a wall-clock rate.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-/work/pyenv/bin/python}
THREADS=${THREADS:-2}
OUT=${OUT:-target/bench-peers}
LLAMA_PY=${LLAMA_PY:-/work/llamavenv/bin/python}
GGUF_BF16=${GGUF_BF16:-${1%/}.gguf}
GGUF_F32=${GGUF_F32:-${2:+${2%/}.gguf}}
mkdir -p "$OUT"
cargo build --release --quiet
BIN=target/release/anatomy

run_dtype() {
    local dt=$1 dir=$2
    # Read the checkpoint once so both programs start from a warm page cache.
    cat "$dir"/*.safetensors > /dev/null
    echo "== $dt: ours" >&2
    "$BIN" bench "$dir" --prompt-len 128 --gen 32 --threads "$THREADS" --json > "$OUT/ours-$dt-128.json"
    "$BIN" bench "$dir" --prompt-len 512 --gen 1 --threads "$THREADS" --json > "$OUT/ours-$dt-512.json"
    echo "== $dt: pytorch eager" >&2
    cat "$dir"/*.safetensors > /dev/null
    local tdt=bfloat16
    [ "$dt" = f32 ] && tdt=float32
    "$PY" scripts/bench_torch.py "$dir" --dtype "$tdt" --threads "$THREADS" > "$OUT/torch-$dt.json"
    local gguf=$GGUF_BF16
    [ "$dt" = f32 ] && gguf=$GGUF_F32
    rm -f "$OUT/llamacpp-$dt.json"
    if [ -x "$LLAMA_PY" ] && [ -f "$gguf" ]; then
        echo "== $dt: llama.cpp ($gguf)" >&2
        cat "$gguf" > /dev/null
        "$LLAMA_PY" scripts/bench_llamacpp.py "$gguf" --threads "$THREADS" > "$OUT/llamacpp-$dt.json"
    else
        echo "== $dt: llama.cpp skipped (need $LLAMA_PY and $gguf; setup in this script's header)" >&2
    fi
}

run_dtype bf16 "$1"
if [ $# -ge 2 ]; then run_dtype f32 "$2"; fi

"$PY" - "$OUT" <<'PYEOF' | tee "$OUT/table.md"
import json, sys, os, datetime
out = sys.argv[1]
rows = []
head = None
for dt in ["bf16", "f32"]:
    p = os.path.join(out, f"ours-{dt}-128.json")
    if not os.path.exists(p):
        continue
    o128 = json.load(open(p))
    o512 = json.load(open(os.path.join(out, f"ours-{dt}-512.json")))
    t = json.load(open(os.path.join(out, f"torch-{dt}.json")))
    lp = os.path.join(out, f"llamacpp-{dt}.json")
    l = json.load(open(lp)) if os.path.exists(lp) else None
    head = head or o128
    figs = [
        ("prefill 128 (tok/s)", o128["prefill_tok_s"], t["prefill_tok_s"]["128"],
         l and l["prefill_tok_s"]["128"], o128["prefill_ceiling_tok_s"]),
        ("prefill 512 (tok/s)", o512["prefill_tok_s"], t["prefill_tok_s"]["512"],
         l and l["prefill_tok_s"]["512"], o512["prefill_ceiling_tok_s"]),
        ("decode 32 after 128 (tok/s)", o128["decode_tok_s"], t["decode_tok_s"],
         l and l["decode_tok_s"], o128["decode_ceiling_tok_s"]),
        ("peak RSS (GB)", o128["peak_rss_bytes"] / 1e9, t["peak_rss_bytes"] / 1e9,
         l and l["peak_rss_bytes"] / 1e9, None),
    ]
    for name, ours, torch, llama, ceil in figs:
        rows.append((dt, name, ours, torch, llama, ceil))
m = head["machine"]
print(f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {m['threads']} threads; "
      f"read {m['mem_read_gb_s']:.1f} GB/s (one thread {m['mem_read_1t_gb_s']:.1f}), triad {m['mem_triad_gb_s']:.1f} GB/s; "
      f"f32 FMA {m['fma_gflop_s']:.0f} GFLOP/s ({m['fma_gflop_s_per_core']:.0f} per core); "
      f"FMA kernel {m['fma_kernel']}; decode reads {head['work']['decode_bytes_per_token']/1e9:.3f} GB/token ({head['weights_dtype']}).\n")
print("| weights | figure | ours | PyTorch eager | llama.cpp | ours / PyTorch | ours / llama.cpp | ceiling | ours / ceiling |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for dt, name, ours, torch, llama, ceil in rows:
    c = f"{ceil:.1f}" if ceil else "—"
    f = f"{100 * ours / ceil:.0f} %" if ceil else "—"
    lv = f"{llama:.2f}" if llama else "—"
    lr = f"{ours / llama:.2f}×" if llama else "—"
    print(f"| {dt} | {name} | {ours:.2f} | {torch:.2f} | {lv} | {ours / torch:.2f}× | {lr} | {c} | {f} |")
PYEOF
