#!/usr/bin/env python
"""Where PyTorch's training step spends its time (chapter 12 §12.15's profile).

Run:   /work/peers/py/bin/python -W ignore scripts/profile_train_torch.py [CONFIG.json] \
           [--batch-size 4] [--seq-len 128] [--threads 2]
Needs: torch 2.15.0, transformers 5.24.0 (checked below).

The step of scripts/bench_train_torch.py (forward with labels, backward, clip_grad_norm_,
AdamW), two warm-up steps, then one step under torch.profiler; prints the operators by
self CPU time.
"""

import argparse
import json

import torch
import transformers
from torch.profiler import ProfilerActivity, profile
from transformers import AutoConfig, AutoModelForCausalLM

assert torch.__version__.startswith("2.15."), torch.__version__
assert transformers.__version__.startswith("5.24."), transformers.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config", nargs="?", default="data/train/qwen3-moe-anatomy.json")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
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

    def step():
        ids = torch.randint(0, cfg.vocab_size, (args.batch_size, args.seq_len), generator=gen)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
