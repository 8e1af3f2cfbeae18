#!/usr/bin/env python3
"""PyTorch eager (transformers' Qwen3MoeForCausalLM) on a checkpoint: prefill and greedy
decode rates, the peer of `anatomy bench` (chapter 10). Batch 1, torch.set_num_threads.

Run:  /work/pyenv/bin/python scripts/bench_torch.py MODEL_DIR --dtype bfloat16|float32
          [--prefill 128,512] [--decode-prompt 128] [--gen 32] [--threads 2]
Uses: torch 2.15, transformers 5.24. Prints one JSON object: rates, versions, peak RSS.
"""

import argparse
import json
import resource
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, DynamicCache


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--prefill", default="128,512")
    ap.add_argument("--decode-prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype)
    model.eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    out = {
        "peer": "pytorch-eager",
        "dtype": args.dtype,
        "threads": args.threads,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "prefill_tok_s": {},
    }
    with torch.inference_mode():
        warm = torch.randint(0, vocab, (1, 8), generator=g)
        model(warm, logits_to_keep=1)
        for n in [int(s) for s in args.prefill.split(",")]:
            ids = torch.randint(0, vocab, (1, n), generator=g)
            t = time.perf_counter()
            model(ids, logits_to_keep=1, use_cache=False)
            out["prefill_tok_s"][str(n)] = n / (time.perf_counter() - t)
        ids = torch.randint(0, vocab, (1, args.decode_prompt), generator=g)
        cache = DynamicCache(config=model.config)
        r = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        nxt = r.logits[:, -1:].argmax(-1)
        t = time.perf_counter()
        for _ in range(args.gen):
            r = model(nxt, past_key_values=r.past_key_values, use_cache=True, logits_to_keep=1)
            nxt = r.logits[:, -1:].argmax(-1)
        out["decode_tok_s"] = args.gen / (time.perf_counter() - t)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))


if __name__ == "__main__":
    main()
