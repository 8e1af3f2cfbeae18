#!/usr/bin/env python3
"""Fixtures for src/quant (chapter 11): llama.cpp's own quantiser and gguf-py's dequantiser.

Versions: llama-cpp-python 0.3.36 (its vendored llama.cpp, built from the sdist),
gguf-py (package `gguf`) 0.19.0, numpy 2.4.6.

Run:  /work/peers/llama/bin/python scripts/gen_quant_fixtures.py
Writes tests/fixtures/quant/:
  inputs.safetensors      <tensor>.f32: the F32 originals, first ROWS rows of each 2-D tensor
  ftype_<N>.safetensors   for each llama ftype N: <tensor>.raw (U8, llama.cpp's bytes of those
                          rows) and <tensor>.dequant (F32, gguf.quants.dequantize of the bytes)
  types.json              {"ftypes": {ftype: {tensor: ggml type name}}} for every tensor of
                          every output, "shapes" (ggml order, ne0 first) and "fallbacks"
                          (per K ftype, the tensors llama.cpp gave a 32-weight type)

A tiny `qwen3` model (2 layers, embedding 256, FFN 96) is written with gguf-py's GGUFWriter,
random weights (seeded), the first rows of every tensor being rows that stress the rounding:
zeros, a constant, one large outlier, negative-dominant, tiny (1e-30), values on half-steps of
the Q8_0, Q4_0 and Q4_1 grids. ffn_down has 96 columns (not a multiple of 256), so K ftypes fall back
to 32-weight types there. The quantisers work row by row without an importance matrix, so the
first ROWS rows of each tensor are a fair subset.
"""

import ctypes
import json
import os
import struct
import sys
import tempfile

import numpy as np
import gguf
import llama_cpp

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "quant")
ROWS = 14
FTYPES = [2, 3, 8, 9, 7, 14, 15, 16, 17, 18, 1, 32]
K_FTYPES = [14, 15, 16, 17, 18]
N_LAYER, N_EMBD, N_FF, N_HEAD, N_KV, HEAD_DIM, N_VOCAB = 2, 256, 96, 4, 2, 64, 64


def stress_rows(rng: np.random.Generator, cols: int) -> list[np.ndarray]:
    """Rows that hit the corners of the block quantisers' arithmetic."""
    rows = []
    rows.append(np.zeros(cols))  # all zeros: d = 0, id = 0
    rows.append(np.full(cols, rng.uniform(-2, 2)))  # constant: max == min
    r = rng.normal(0, 0.02, cols)
    r[rng.integers(cols)] = 3.0  # one large outlier
    rows.append(r)
    rows.append(-np.abs(rng.normal(0, 0.05, cols)) + 0.001 * rng.normal(size=cols))  # negative-dominant
    rows.append(rng.normal(0, 1e-30, cols))  # tiny: scales underflow in f16
    # Q8_0 half-steps: each 32-block has amax 127 (d = 1 exactly), the rest on k + 0.5
    r = rng.integers(-127, 127, cols) + 0.5
    r[::32] = 127.0
    rows.append(r)
    # Q4_0 half-steps: each block's max-by-magnitude is -8 (d = 1), the rest on k + 0.5
    r = rng.integers(-8, 7, cols) + 0.5
    r[::32] = -8.0
    rows.append(r)
    # Q4_1 half-steps: each block spans 0..15 (d = 1, min = 0), the rest on k + 0.5
    r = rng.integers(0, 15, cols) + 0.5
    r[::32] = 0.0
    r[1::32] = 15.0
    rows.append(r)
    # positive-only, small spread around an offset (Q4_1 / K mins)
    rows.append(0.5 + rng.uniform(0, 0.01, cols))
    return rows


def make_tensor(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """A [rows, cols] weight: the stress rows first, then Gaussian and heavy-tailed rows."""
    out = rng.normal(0, 0.02, (rows, cols))
    out[1::2] = rng.standard_t(3, (rows // 2, cols)) * 0.02  # heavy tails on odd rows
    for i, r in enumerate(stress_rows(rng, cols)):
        if i < rows:
            out[i] = r
    return out.astype(np.float32)


def model_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """numpy shapes are row-major [ne1, ne0]."""
    t: dict[str, np.ndarray] = {}
    t["token_embd.weight"] = make_tensor(rng, N_VOCAB, N_EMBD)
    for layer in range(N_LAYER):
        p = f"blk.{layer}."
        t[p + "attn_norm.weight"] = np.ones(N_EMBD, np.float32)
        t[p + "attn_q.weight"] = make_tensor(rng, N_HEAD * HEAD_DIM, N_EMBD)
        t[p + "attn_k.weight"] = make_tensor(rng, N_KV * HEAD_DIM, N_EMBD)
        t[p + "attn_v.weight"] = make_tensor(rng, N_KV * HEAD_DIM, N_EMBD)
        t[p + "attn_output.weight"] = make_tensor(rng, N_EMBD, N_HEAD * HEAD_DIM)
        t[p + "attn_q_norm.weight"] = np.ones(HEAD_DIM, np.float32)
        t[p + "attn_k_norm.weight"] = np.ones(HEAD_DIM, np.float32)
        t[p + "ffn_norm.weight"] = np.ones(N_EMBD, np.float32)
        t[p + "ffn_gate.weight"] = make_tensor(rng, N_FF, N_EMBD)
        t[p + "ffn_up.weight"] = make_tensor(rng, N_FF, N_EMBD)
        t[p + "ffn_down.weight"] = make_tensor(rng, N_EMBD, N_FF)
    t["output_norm.weight"] = np.ones(N_EMBD, np.float32)
    t["output.weight"] = make_tensor(rng, N_VOCAB, N_EMBD)
    return t


def write_model(path: str, tensors: dict[str, np.ndarray]) -> None:
    w = gguf.GGUFWriter(path, "qwen3")
    w.add_block_count(N_LAYER)
    w.add_context_length(256)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_tokenizer_model("none")
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src: str, dst: str, ftype: int) -> None:
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 1
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) != 0:
        sys.exit(f"llama_model_quantize failed for ftype {ftype}")


def save_safetensors(path: str, arrays: dict[str, np.ndarray]) -> None:
    """The safetensors format by hand (the llama venv has no safetensors package)."""
    dtypes = {np.dtype(np.uint8): "U8", np.dtype(np.float32): "F32"}
    header, blobs, offset = {}, [], 0
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        b = a.tobytes()
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261202)
    tensors = model_tensors(rng)
    inputs = {f"{n}.f32": a[:ROWS] for n, a in tensors.items() if a.ndim == 2}
    save_safetensors(os.path.join(OUT, "inputs.safetensors"), inputs)
    types: dict = {"rows_kept": ROWS, "shapes": {n: list(a.shape[::-1]) for n, a in tensors.items()}, "ftypes": {}, "fallbacks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "f32.gguf")
        write_model(src, tensors)
        for ftype in FTYPES:
            dst = os.path.join(tmp, f"q{ftype}.gguf")
            quantize(src, dst, ftype)
            reader = gguf.GGUFReader(dst)
            out: dict[str, np.ndarray] = {}
            kinds: dict[str, str] = {}
            for t in reader.tensors:
                qtype = gguf.GGMLQuantizationType(t.tensor_type)
                kinds[t.name] = qtype.name
                if len(t.shape) != 2 or qtype == gguf.GGMLQuantizationType.F32:
                    continue
                raw = np.asarray(t.data).reshape(int(t.shape[1]), -1).view(np.uint8)[:ROWS]
                deq = gguf.quants.dequantize(raw, qtype).astype(np.float32)
                assert deq.shape == inputs[t.name + ".f32"].shape, (t.name, deq.shape)
                out[t.name + ".raw"] = raw
                out[t.name + ".dequant"] = deq
            save_safetensors(os.path.join(OUT, f"ftype_{ftype}.safetensors"), out)
            types["ftypes"][str(ftype)] = kinds
            if ftype in K_FTYPES:
                # A 32-weight type in a K ftype is llama.cpp's fallback for a row length that
                # is not a multiple of 256.
                types["fallbacks"][str(ftype)] = sorted(
                    n for n, k in kinds.items() if k in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16")
                )
            print(ftype, sorted(set(kinds.values())))
    with open(os.path.join(OUT, "types.json"), "w") as f:
        json.dump(types, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
