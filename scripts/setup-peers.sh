#!/usr/bin/env bash
# Installs chapter 10's peers and makes the benchmark checkpoints, from the registries only
# (PyPI, crates.io), into PEERS (default target/peers) — each step skipped when its result
# is already there, so running it again costs nothing:
#   PEERS/py        Python venv: torch 2.15.0 + transformers 5.24.0 + tiktoken 0.14.0
#                   (checkpoint generator, PyTorch eager peer, Qwen tokenizer, GGUF converter)
#   PEERS/llama     Python venv: llama-cpp-python 0.3.36 compiled from its PyPI sdist
#                   (it vendors llama.cpp; GGML_NATIVE, so this CPU's instructions)
#   PEERS/models/{bf16,f32}        scripts/gen_bench_model.py (≈ 6.2 GB and 12.4 GB)
#   PEERS/models/{bf16,f32}.gguf   llama.cpp's convert_hf_to_gguf.py from that sdist
#   PEERS/models/{q8_0,q4_k_m}.gguf  llama.cpp's quantizer (llama_model_quantize, no
#                   importance matrix) on bf16.gguf (≈ 3.3 GB and 1.9 GB)
#   scripts/candle-bench/target/release/candle-bench   candle-transformers 0.11.1
#
#   scripts/setup-peers.sh            then   scripts/bench-peers.sh
#
# About 30 minutes on 2 cores and ≈ 40 GB of disk (most of the time compiling llama.cpp and
# candle, downloading torch and writing the checkpoints). DTYPES="bf16" makes only the bf16
# checkpoint and GGUFs (≈ 17 GB; the f32 ones serve only the PyTorch and candle peers).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PEERS=${PEERS:-$ROOT/target/peers}
DTYPES=${DTYPES:-bf16 f32}
mkdir -p "$PEERS/models"
log() { echo "== setup-peers: $*" >&2; }

if ! "$PEERS/py/bin/python" -c 'import torch, transformers, tiktoken' 2>/dev/null; then
    log "PyTorch venv"
    python3 -m venv "$PEERS/py"
    "$PEERS/py/bin/pip" install -q torch==2.15.0 transformers==5.24.0 tiktoken==0.14.0
fi
PY=$PEERS/py/bin/python

SDIST_DIR=$PEERS/llama-src
if ! "$PEERS/llama/bin/python" -c 'import llama_cpp' 2>/dev/null; then
    log "llama-cpp-python 0.3.36 (compiling llama.cpp)"
    python3 -m venv "$PEERS/llama"
    "$PEERS/llama/bin/pip" install -q numpy
    mkdir -p "$SDIST_DIR"
    "$PEERS/llama/bin/pip" download -q --no-deps --no-binary llama-cpp-python \
        llama-cpp-python==0.3.36 -d "$SDIST_DIR"
    # `--no-binary llama-cpp-python`, not `:all:`: otherwise pip compiles cmake and ninja too.
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$PEERS/llama/bin/pip" install -q --no-binary llama-cpp-python \
        "$SDIST_DIR"/llama_cpp_python-0.3.36.tar.gz
fi

# llama.cpp a second time, for AVX2 alone (issue 15's AVX2-only comparison on a CPU that has
# AVX-512): LLAMA_AVX2=1 makes PEERS/llama-avx2, the same sdist with GGML_NATIVE off.
if [ "${LLAMA_AVX2:-0}" = 1 ] && ! "$PEERS/llama-avx2/bin/python" -c 'import llama_cpp' 2>/dev/null; then
    log "llama-cpp-python 0.3.36 for AVX2 alone (GGML_NATIVE=OFF, AVX-512 off)"
    python3 -m venv "$PEERS/llama-avx2"
    "$PEERS/llama-avx2/bin/pip" install -q numpy
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF \
-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$PEERS/llama-avx2/bin/pip" install -q --no-binary llama-cpp-python \
        "$SDIST_DIR"/llama_cpp_python-0.3.36.tar.gz
fi

# llama.cpp a third time, without AMX: on a CPU with AMX, GGML_NATIVE compiles in its AMX
# matmul, which segfaults in ggml_backend_amx_mul_mat on these files, so the default build
# runs only with weight repacking off. LLAMA_NOAMX=1 makes PEERS/llama-noamx: every AVX-512
# extension this kind of CPU has, AMX off, so repacking (its fastest CPU layouts) works.
if [ "${LLAMA_NOAMX:-0}" = 1 ] && ! "$PEERS/llama-noamx/bin/python" -c 'import llama_cpp' 2>/dev/null; then
    log "llama-cpp-python 0.3.36 without AMX (GGML_NATIVE=OFF, AVX-512 on, AMX off)"
    python3 -m venv "$PEERS/llama-noamx"
    "$PEERS/llama-noamx/bin/pip" install -q numpy
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON \
-DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
-DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$PEERS/llama-noamx/bin/pip" install -q --no-binary llama-cpp-python \
        "$SDIST_DIR"/llama_cpp_python-0.3.36.tar.gz
fi

# CANDLE=0 skips the candle peer (bench-peers.sh uses it only with CANDLE=1).
if [ "${CANDLE:-1}" = 1 ] && [ ! -x scripts/candle-bench/target/release/candle-bench ]; then
    log "candle-bench (candle-transformers 0.11.1)"
    cargo build --release --quiet --manifest-path scripts/candle-bench/Cargo.toml
fi

for dt in $DTYPES; do
    dir=$PEERS/models/$dt
    if [ ! -f "$dir/model.safetensors.index.json" ]; then
        log "checkpoint $dir"
        tdt=bfloat16; [ "$dt" = f32 ] && tdt=float32
        "$PY" scripts/gen_bench_model.py "$dir" --dtype "$tdt"
    fi
done

# GGUF: the converter writes the vocabulary into the file, and the bench checkpoints have no
# tokenizer, so Qwen's (made from data/qwen.tiktoken) goes beside links to the weights.
need_gguf=0
for dt in $DTYPES; do [ -f "$PEERS/models/$dt.gguf" ] || need_gguf=1; done
if [ "$need_gguf" = 1 ]; then
    tar xzf "$SDIST_DIR"/llama_cpp_python-0.3.36.tar.gz -C "$SDIST_DIR"
    CONVERT=$SDIST_DIR/llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py
    TOK=$PEERS/qwen-tokenizer
    [ -f "$TOK/tokenizer.json" ] || "$PY" scripts/make_qwen_tokenizer.py data/qwen.tiktoken "$TOK"
    for dt in $DTYPES; do
        [ -f "$PEERS/models/$dt.gguf" ] && continue
        log "GGUF $dt"
        conv=$PEERS/convert-$dt
        rm -rf "$conv" && mkdir -p "$conv"
        ln -s "$PEERS/models/$dt"/* "$conv"/
        cp "$TOK"/* "$conv"/
        "$PY" "$CONVERT" "$conv" --outtype "$dt" --outfile "$PEERS/models/$dt.gguf.part"
        mv "$PEERS/models/$dt.gguf.part" "$PEERS/models/$dt.gguf"
        rm -rf "$conv"
    done
fi
# The quantised rows: llama.cpp's own quantizer, through llama-cpp-python's binding of
# `llama_model_quantize` (ftype 7 = Q8_0, 15 = Q4_K_M), from the bf16 GGUF.
for q in q8_0:7 q4_k_m:15; do
    name=${q%%:*} ftype=${q##*:}
    [ -f "$PEERS/models/$name.gguf" ] && continue
    log "GGUF $name (llama.cpp's quantizer)"
    "$PEERS/llama/bin/python" - "$PEERS/models/bf16.gguf" "$PEERS/models/$name.gguf.part" "$ftype" <<'PYEOF'
import ctypes, sys
import llama_cpp
src, dst, ftype = sys.argv[1], sys.argv[2], int(sys.argv[3])
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = ftype
if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)) != 0:
    sys.exit(f"llama_model_quantize failed: {src} -> {dst} (ftype {ftype})")
PYEOF
    mv "$PEERS/models/$name.gguf.part" "$PEERS/models/$name.gguf"
done
log "done: scripts/bench-peers.sh (PEERS=$PEERS)"
