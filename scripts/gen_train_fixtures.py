#!/usr/bin/env python
"""Fixtures for chapter 12's optimiser and checkpoints (src/train/optimizer.rs, trainer.rs),
computed by PyTorch and transformers, never by a second implementation of ours.

Run:   /work/peers/py/bin/python scripts/gen_train_fixtures.py optimizer
       /work/peers/py/bin/python scripts/gen_train_fixtures.py checkpoint
Needs: torch 2.15.0, transformers 5.24.0 (checked below), numpy.

optimizer  → tests/fixtures/train/optimizer.json:
    torch.optim.AdamW (weight decay, bias correction; two groups, one without decay)
    stepped under transformers' get_cosine_with_min_lr_schedule_with_warmup; the schedules'
    multipliers (cosine with floor, cosine, linear); torch.nn.utils.clip_grad_norm_.
checkpoint → tests/fixtures/train/trained/logits.json:
    loads tests/fixtures/train/trained/ (a checkpoint `anatomy train` wrote, see
    tests/fixtures/train/PROVENANCE.md) with AutoModelForCausalLM.from_pretrained (no
    missing, unexpected or mismatched keys) and records its logits on fixed ids.
"""

import json
import os
import sys

import torch
import transformers
from transformers.optimization import (
    get_cosine_schedule_with_warmup,
    get_cosine_with_min_lr_schedule_with_warmup,
    get_linear_schedule_with_warmup,
)

assert torch.__version__.startswith("2.15."), torch.__version__
assert transformers.__version__.startswith("5.24."), transformers.__version__
torch.set_num_threads(1)  # a fixed summation order
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "train")


def flat(t):
    return [float(v) for v in t.detach().to(torch.float64).reshape(-1).tolist()]


def lambdas(make, steps):
    """The LambdaLR multipliers a transformers schedule applies at steps 0..steps-1."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = make(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def optimizer_fixture():
    gen = torch.Generator().manual_seed(12)
    shapes = {"decay": [(6, 4), (3, 5)], "no_decay": [(7,)]}
    lr, betas, eps, wd = 1e-2, (0.9, 0.95), 1e-8, 0.1
    warmup, total, min_rate, steps = 2, 8, 0.1, 5
    params = {g: [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in ss]
              for g, ss in shapes.items()}
    init = {g: [flat(p) for p in ps] for g, ps in params.items()}
    opt = torch.optim.AdamW(
        [{"params": params["decay"], "weight_decay": wd},
         {"params": params["no_decay"], "weight_decay": 0.0}],
        lr=lr, betas=betas, eps=eps, foreach=False)
    sched = get_cosine_with_min_lr_schedule_with_warmup(
        opt, num_warmup_steps=warmup, num_training_steps=total, min_lr_rate=min_rate)
    history = []
    for _ in range(steps):
        grads = {g: [torch.randn(p.shape, generator=gen) for p in ps] for g, ps in params.items()}
        for g, ps in params.items():
            for p, gr in zip(ps, grads[g]):
                p.grad = gr.clone()
        used_lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        history.append({
            "lr": used_lr,
            "grads": {g: [flat(x) for x in gs] for g, gs in grads.items()},
            "params": {g: [flat(p) for p in ps] for g, ps in params.items()},
        })

    schedules = {
        "cosine_min_lr": {"warmup": 3, "total": 20, "min_lr_rate": 0.1, "decay": "cosine",
                          "factors": lambdas(lambda o: get_cosine_with_min_lr_schedule_with_warmup(
                              o, num_warmup_steps=3, num_training_steps=20, min_lr_rate=0.1), 24)},
        "cosine": {"warmup": 4, "total": 15, "min_lr_rate": 0.0, "decay": "cosine",
                   "factors": lambdas(lambda o: get_cosine_schedule_with_warmup(
                       o, num_warmup_steps=4, num_training_steps=15), 18)},
        "linear": {"warmup": 2, "total": 10, "min_lr_rate": 0.0, "decay": "linear",
                   "factors": lambdas(lambda o: get_linear_schedule_with_warmup(
                       o, num_warmup_steps=2, num_training_steps=10), 13)},
    }

    clip_grads = [torch.randn(s, generator=gen) * 3 for s in [(5, 3), (4,), (2, 2, 2)]]
    # clip_grad_norm_ clips the .grad of parameters.
    holders = [torch.nn.Parameter(torch.zeros(g.shape)) for g in clip_grads]
    for h, g in zip(holders, clip_grads):
        h.grad = g.clone()
    total_norm = torch.nn.utils.clip_grad_norm_(holders, max_norm=1.5, foreach=False)
    clipped = [h.grad for h in holders]

    doc = {
        "generator": "scripts/gen_train_fixtures.py optimizer",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "adamw": {"lr": lr, "betas": list(betas), "eps": eps, "weight_decay": wd,
                  "warmup": warmup, "total": total, "min_lr_rate": min_rate,
                  "shapes": {g: [list(s) for s in ss] for g, ss in shapes.items()},
                  "init": init, "steps": history},
        "schedules": schedules,
        "clip": {"max_norm": 1.5, "grads": [flat(g) for g in clip_grads],
                 "clipped": [flat(g) for g in clipped], "total_norm": float(total_norm)},
    }
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "optimizer.json"), "w") as f:
        json.dump(doc, f)


def checkpoint_fixture():
    from transformers import AutoModelForCausalLM

    d = os.path.join(OUT, "trained")
    model, info = AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, output_loading_info=True)
    # Every tensor of the file is a parameter and every parameter came from the file.
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    model.eval()
    cfg = model.config
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, cfg.vocab_size, (11,), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=ids[None, :]).logits[0]
    doc = {
        "generator": "scripts/gen_train_fixtures.py checkpoint",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "model_class": type(model).__name__,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "ids": [int(i) for i in ids],
        "logits": flat(logits),
        "shape": list(logits.shape),
    }
    with open(os.path.join(d, "logits.json"), "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    what = sys.argv[1:] or ["optimizer"]
    for w in what:
        {"optimizer": optimizer_fixture, "checkpoint": checkpoint_fixture}[w]()
