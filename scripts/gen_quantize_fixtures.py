#!/usr/bin/env python3
"""Fixtures of `anatomy quantize` (chapter 11): what llama.cpp's own quantiser makes of two
small Qwen3-MoE checkpoints, per file type and per tensor.

Run (from the repository root; each stage needs its own interpreter):
    /work/peers/py/bin/python    scripts/gen_quantize_fixtures.py hf
    /work/peers/llama/bin/python scripts/gen_quantize_fixtures.py gguf

Versions: stage `hf` — torch 2.15.0, transformers 5.24.0; stage `gguf` — gguf-py 0.19.0,
numpy, llama-cpp-python 0.3.36 (its vendored llama.cpp does the quantising). The versions
are written into each expected-*.json.

Stage `hf` writes tests/fixtures/quantize/hf/: a random Qwen3MoeForCausalLM (hidden 256,
2 layers, 2 experts of width 256, 2 query heads / 1 KV head of 128, vocab 256, untied
LM head), saved by transformers' `save_pretrained` in bf16. Every row is a multiple of
256, so the K types apply without fallback.

Stage `gguf`, for that checkpoint and for data/tiny-qwen3-moe (hidden 16: rows of 16 and
32, so llama.cpp's fallback types; 8 experts, so its 8-expert rules; tied embeddings):
  1. gguf-py's GGUFWriter writes an all-F32 GGUF: tensor names from gguf-py's own
     TensorNameMap for MODEL_ARCH.QWEN3MOE, experts stacked in expert order into one
     [E, rows, cols] tensor, hyper-parameters from config.json (what llama.cpp's
     converter writes for a Qwen3-MoE; tokenizer model "none"). Not committed.
  2. `llama_cpp.llama_model_quantize` (default parameters: no imatrix, no overrides)
     turns it into every file type below.
  3. gguf-py's GGUFReader reads each output; per tensor we record the type llama.cpp
     chose, its dims, the sha256 of its bytes, and the RMSE of gguf-py's dequantisation
     against the F32 weights. → tests/fixtures/quantize/expected-{hf,tiny}.json
"""

import hashlib
import json
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "quantize"
HF_DIR = OUT / "hf"
TINY_DIR = ROOT / "data" / "tiny-qwen3-moe"
WORK = Path("/tmp/gen_quantize_fixtures")
SEED = 20261202

# LLAMA_FTYPE_MOSTLY_* ids of llama.h.
FTYPES = {
    "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9,
    "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18, "bf16": 32,
}


def stage_hf():
    import torch
    import transformers
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(SEED)
    cfg = Qwen3MoeConfig(
        vocab_size=256,
        hidden_size=256,
        intermediate_size=256,
        moe_intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        num_experts=2,
        num_experts_per_tok=1,
        norm_topk_prob=True,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        decoder_sparse_step=1,
    )
    model = Qwen3MoeForCausalLM(cfg).to(torch.bfloat16)
    # Norm weights at 1 would hide a norm handed to the wrong place: make them distinct.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    HF_DIR.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(HF_DIR)
    (HF_DIR / "versions.json").write_text(json.dumps({
        "torch": torch.__version__, "transformers": transformers.__version__, "seed": SEED,
    }, indent=1) + "\n")
    print("wrote", HF_DIR, sorted(p.name for p in HF_DIR.iterdir()))


def read_safetensors(path):
    """name -> float32 numpy array (BF16, F16 and F32 files)."""
    import numpy as np

    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = data[b:e]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F16":
            a = np.frombuffer(buf, dtype=np.float16).astype(np.float32)
        elif info["dtype"] == "F32":
            a = np.frombuffer(buf, dtype=np.float32).copy()
        else:
            raise SystemExit(f"{path}: {name}: dtype {info['dtype']} not handled")
        out[name] = a.reshape(info["shape"])
    return out


def write_f32_gguf(model_dir, path):
    """The all-F32 GGUF of a Hugging Face Qwen3-MoE checkpoint, by gguf-py. Returns
    GGUF name -> f32 array (row-major)."""
    import numpy as np
    import gguf

    cfg = json.loads((model_dir / "config.json").read_text())
    n_layer = cfg["num_hidden_layers"]
    n_expert = cfg.get("num_experts", cfg.get("num_local_experts"))
    rope = cfg.get("rope_parameters") or {}
    rope_theta = rope.get("rope_theta", cfg.get("rope_theta"))
    weights = read_safetensors(model_dir / "model.safetensors")

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3MOE, n_layer)
    tensors = {}
    for l in range(n_layer):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            parts = [weights.pop(f"model.layers.{l}.mlp.experts.{e}.{proj}.weight")
                     for e in range(n_expert)]
            stacked = f"model.layers.{l}.mlp.experts.{proj}.weight"
            weights[stacked] = np.stack(parts)
    for hf_name, a in weights.items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise SystemExit(f"{model_dir}: no GGUF name for {hf_name}")
        tensors[name] = np.ascontiguousarray(a, dtype=np.float32)

    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_name(model_dir.name)
    w.add_block_count(n_layer)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_count(n_expert)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(rope_theta)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(0)
    w.add_tokenizer_model("none")
    for name, a in tensors.items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def stage_gguf():
    import ctypes
    import importlib.metadata as md
    import numpy as np
    import gguf
    import llama_cpp

    WORK.mkdir(parents=True, exist_ok=True)
    versions = {"gguf": md.version("gguf"), "llama_cpp_python": llama_cpp.__version__,
                "numpy": np.__version__}
    for label, model_dir in (("hf", HF_DIR), ("tiny", TINY_DIR)):
        f32_path = WORK / f"{label}-input-f32.gguf"
        ref = write_f32_gguf(model_dir, f32_path)
        result = {"checkpoint": str(model_dir.relative_to(ROOT)), "versions": versions,
                  "ftypes": {}}
        for ftype, fid in FTYPES.items():
            out_path = WORK / f"{label}-{ftype}.gguf"
            p = llama_cpp.llama_model_quantize_default_params()
            p.ftype = fid
            p.nthread = 2
            rc = llama_cpp.llama_model_quantize(str(f32_path).encode(), str(out_path).encode(),
                                                ctypes.byref(p))
            if rc != 0:
                raise SystemExit(f"llama_model_quantize {label} {ftype}: {rc}")
            reader = gguf.GGUFReader(str(out_path))
            per_tensor = {}
            for t in reader.tensors:
                raw = np.asarray(t.data).tobytes()
                want = ref[t.name]
                got = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
                got = np.asarray(got, dtype=np.float32).reshape(want.shape)
                rmse = float(np.sqrt(np.mean((got.astype(np.float64) - want) ** 2)))
                per_tensor[t.name] = {
                    "type": t.tensor_type.name,
                    "dims": [int(d) for d in t.shape],
                    "bytes": len(raw),
                    "sha256": hashlib.sha256(raw).hexdigest(),
                    "rmse": rmse,
                }
            file_type = reader.get_field("general.file_type")
            result["ftypes"][ftype] = {
                "file_type": int(file_type.parts[file_type.data[0]][0]),
                "tensors": per_tensor,
            }
            print(label, ftype, "ok:", len(per_tensor), "tensors")
        dest = OUT / f"expected-{label}.json"
        dest.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print("wrote", dest)


if __name__ == "__main__":
    if sys.argv[1:] == ["hf"]:
        stage_hf()
    elif sys.argv[1:] == ["gguf"]:
        stage_gguf()
    else:
        raise SystemExit(__doc__)
