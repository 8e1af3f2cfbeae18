#!/usr/bin/env python
"""PyTorch's training speed on the model `anatomy train` trains (chapter 12's comparison).

Run:   /work/peers/py/bin/python scripts/bench_train_torch.py [CONFIG.json] \
           [--batch-size 8] [--seq-len 128] [--steps 10] [--threads 2]
Needs: torch 2.15.0, transformers 5.24.0 (checked below).

One training step = transformers' Qwen3MoeForCausalLM forward with labels=input_ids (the
cross-entropy plus router_aux_loss_coef x the load-balancing loss when the config's
output_router_logits), backward, clip_grad_norm_(1.0), torch.optim.AdamW step: the same
work as one step of `anatomy train` with the same config, batch and sequence length (which
uses Muon for the hidden matrices; their cost is negligible beside the 151,936-wide head).
Prints one JSON object with the median tokens/s (batch x seq_len tokens per step) over
`--steps` steps after two warm-up steps; compare with `tokens_per_s` in train_log.jsonl.
"""

import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

assert torch.__version__.startswith("2.15."), torch.__version__
assert transformers.__version__.startswith("5.24."), transformers.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config", nargs="?", default="data/train/qwen3-moe-anatomy.json")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.config) as f:
        cfg = AutoConfig.for_model(**json.load(f))
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    times, losses = [], []
    for step in range(args.steps + 2):
        ids = torch.randint(0, cfg.vocab_size, (args.batch_size, args.seq_len), generator=gen)
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        losses.append(float(out.loss))
        if step >= 2:
            times.append(dt)
    tokens = args.batch_size * args.seq_len
    print(json.dumps({
        "torch": torch.__version__, "transformers": transformers.__version__,
        "config": args.config, "threads": args.threads,
        "batch_size": args.batch_size, "seq_len": args.seq_len,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "median_step_s": statistics.median(times),
        "tokens_per_s": tokens / statistics.median(times),
        "first_loss": losses[0],
    }))


if __name__ == "__main__":
    main()
