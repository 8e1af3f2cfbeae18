#!/usr/bin/env python3
"""The benchmark checkpoint of chapter 10: Qwen3-30B-A3B's per-layer dimensions with 4
layers instead of 48, random weights, written by transformers' own `save_pretrained`.

Run:  /work/pyenv/bin/python scripts/gen_bench_model.py OUT_DIR [--dtype bfloat16|float32]
Uses: torch 2.15, transformers 5.24 (the versions are printed and written into
      OUT_DIR/bench_model.json).

Dimensions (Qwen3-30B-A3B's config.json): hidden 2048, 32 query / 4 KV heads of 128,
128 experts of width 768, top-8 with norm_topk_prob, vocab 151,936, rope_theta 1e6,
untied LM head. ~3.1 B parameters: ~6.2 GB in bf16, ~12.4 GB in f32 — write it outside
the repository (or under target/); it is never committed.

Weights are transformers' own initialisation (normal, std = initializer_range = 0.02,
norms at 1) under a fixed seed, so activations stay finite; the f32 variant is the very
same draw (drawn in bf16, then widened), so the two checkpoints hold equal values.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

SEED = 20261129

CONFIG = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=4,
    num_attention_heads=32,
    num_key_value_heads=4,
    head_dim=128,
    moe_intermediate_size=768,
    num_experts=128,
    num_experts_per_tok=8,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    rope_theta=1e6,
    tie_word_embeddings=False,
    initializer_range=0.02,
    attention_bias=False,
    use_sliding_window=False,
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    args = ap.parse_args()
    if (Path(__file__).resolve().parent.parent / ".git").exists():
        repo = Path(__file__).resolve().parent.parent
        out = args.out.resolve()
        if repo in out.parents and (repo / "target") not in out.parents:
            sys.exit(f"refusing to write ~6 GB into the repository ({out}); use target/ or elsewhere")
    t0 = time.time()
    torch.manual_seed(SEED)
    cfg = Qwen3MoeConfig(**CONFIG)
    torch.set_default_dtype(torch.bfloat16)
    model = Qwen3MoeForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model = model.to(torch.bfloat16)
    if args.dtype == "float32":
        model = model.to(torch.float32)
    model.eval()
    n = sum(p.numel() for p in model.parameters())
    print(f"built {n / 1e9:.3f} B parameters in {time.time() - t0:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, max_shard_size="2GB")
    info = {
        "seed": SEED,
        "dtype": args.dtype,
        "parameters": n,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    (args.out / "bench_model.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"saved to {args.out} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
