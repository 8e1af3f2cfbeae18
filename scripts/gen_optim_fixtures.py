#!/usr/bin/env python
"""Fixtures for chapter 7 (src/optim/): Newton-Schulz, torch.optim.Muon, clip_grad_norm_,
SGD-momentum and Adam, all computed by PyTorch.

Run:   /work/pyenv/bin/python scripts/gen_optim_fixtures.py
Needs: torch 2.15.0 (checked below), numpy. Writes tests/fixtures/optim/*.json.

torch runs Newton-Schulz in bfloat16 (`ortho_grad = grad.to(dtype=torch.bfloat16)` in
torch/optim/_muon.py). For an f32 reference this script reproduces the same call path with
the dtype as a parameter (`ns_reproduction`), checks that the reproduction in bfloat16 equals
torch's own `_zeropower_via_newtonschulz` bit for bit, and then runs it in float32. The Muon
f32 variant runs the real `torch.optim.Muon.step` with that function patched in.
"""

import json
import math
import os

import numpy as np
import torch
import torch.optim._muon as muon_mod

assert torch.__version__.startswith("2.15."), torch.__version__
torch.set_num_threads(1)  # a fixed summation order
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "optim")
TORCH_NS = muon_mod._zeropower_via_newtonschulz


def flat(t):
    return [float(v) for v in t.detach().to(torch.float64).reshape(-1).tolist()]


def ns_reproduction(grad, ns_coefficients, ns_steps, eps, dtype):
    """torch's _zeropower_via_newtonschulz with the working dtype as a parameter."""
    a, b, c = ns_coefficients
    ortho_grad = grad.to(dtype=dtype, copy=True)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    ortho_grad.div_(ortho_grad.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram_matrix = ortho_grad @ ortho_grad.T
        gram_update = torch.addmm(gram_matrix, gram_matrix, gram_matrix, beta=b, alpha=c)
        ortho_grad = torch.addmm(ortho_grad, gram_update, ortho_grad, beta=a)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    return ortho_grad


def ns_f32(grad, ns_coefficients, ns_steps, eps):
    return ns_reproduction(grad, ns_coefficients, ns_steps, eps, torch.float32)


COEF = (muon_mod.DEFAULT_A, muon_mod.DEFAULT_B, muon_mod.DEFAULT_C)


def newton_schulz_cases():
    gen = torch.Generator().manual_seed(7)
    shapes = [((4, 4), 5), ((8, 16), 5), ((16, 8), 5), ((32, 32), 5), ((10, 50), 5),
              ((48, 12), 5), ((16, 16), 1), ((16, 16), 2), ((16, 16), 10), ((24, 40), 5)]
    cases = []
    for k, (shape, steps) in enumerate(shapes):
        g = torch.randn(shape, generator=gen)
        if k == 3:
            g = g * 1000.0  # the Frobenius normalisation makes the scale irrelevant
        if k == 9:
            # a spread-out spectrum: singular values from 1 down to 1e-3
            u, _, vh = torch.linalg.svd(g.double(), full_matrices=False)
            s = torch.logspace(0, -3, min(shape), dtype=torch.float64)
            g = (u @ torch.diag(s) @ vh).float()
        torch_bf16 = TORCH_NS(g, COEF, steps, muon_mod.EPS)
        repro_bf16 = ns_reproduction(g, COEF, steps, muon_mod.EPS, torch.bfloat16)
        assert torch.equal(torch_bf16, repro_bf16), "reproduction differs from torch in bf16"
        out32 = ns_f32(g, COEF, steps, muon_mod.EPS)
        g64 = g.double()
        u, s, vh = torch.linalg.svd(g64, full_matrices=False)
        cases.append({
            "name": f"{shape[0]}x{shape[1]}_steps{steps}",
            "shape": list(shape),
            "steps": steps,
            "input": flat(g),
            "f32": flat(out32),
            "bf16": flat(torch_bf16),
            "sigma_before": flat(s),
            "sigma_after_f32": flat(torch.linalg.svdvals(out32.double())),
            "polar": flat(u @ vh),
        })
    # all zeros: the norm is clamped at eps and the output stays zero
    z = torch.zeros(3, 5)
    cases.append({"name": "zeros_3x5", "shape": [3, 5], "steps": 5, "input": flat(z),
                  "f32": flat(ns_f32(z, COEF, 5, muon_mod.EPS)),
                  "bf16": flat(TORCH_NS(z, COEF, 5, muon_mod.EPS)),
                  "sigma_before": [0.0] * 3, "sigma_after_f32": [0.0] * 3, "polar": None})
    return cases


def muon_cases():
    gen = torch.Generator().manual_seed(11)
    configs = [
        ("square_default", (12, 12), dict(lr=0.02)),
        ("wide_default", (8, 20), dict(lr=0.02)),
        ("tall_original", (40, 10), dict(lr=0.02, weight_decay=0.0)),
        ("wide_match_rms_adamw", (16, 24), dict(lr=0.01, adjust_lr_fn="match_rms_adamw")),
        ("tall_spectral_unclamped", (30, 6), dict(lr=0.01, adjust_lr_fn="spectral_unclamped")),
        ("no_nesterov", (10, 14), dict(lr=0.05, nesterov=False, momentum=0.9)),
    ]
    cases = []
    for name, shape, kw in configs:
        p0 = torch.randn(shape, generator=gen) * 0.1
        grads = [torch.randn(shape, generator=gen) for _ in range(3)]
        out = {}
        for variant in ("bf16", "f32"):
            p = torch.nn.Parameter(p0.clone())
            opt = torch.optim.Muon([p], **kw)
            traj = []
            saved = muon_mod._zeropower_via_newtonschulz
            if variant == "f32":
                muon_mod._zeropower_via_newtonschulz = ns_f32
            try:
                for g in grads:
                    p.grad = g.clone()
                    opt.step()
                    traj.append(flat(p))
            finally:
                muon_mod._zeropower_via_newtonschulz = saved
            out[variant] = traj
        full = dict(opt.defaults)
        cases.append({
            "name": name,
            "shape": list(shape),
            "lr": full["lr"],
            "weight_decay": full["weight_decay"],
            "momentum": full["momentum"],
            "nesterov": full["nesterov"],
            "adjust_lr_fn": full["adjust_lr_fn"] or "original",
            "ns_steps": full["ns_steps"],
            "eps": full["eps"],
            "param0": flat(p0),
            "grads": [flat(g) for g in grads],
            "params_f32": out["f32"],
            "params_bf16": out["bf16"],
        })
    return cases


def clip_cases():
    gen = torch.Generator().manual_seed(3)
    shapes = [(3, 4), (5,), (2, 3, 2)]
    specs = [("l2_clipped", 2.0, 1.0), ("l2_not_clipped", 2.0, 100.0), ("inf", math.inf, 0.5),
             ("l1", 1.0, 2.0), ("l3", 3.0, 1.5), ("p0.5", 0.5, 10.0), ("neg_inf", -math.inf, 0.01),
             ("l0", 0.0, 2.0)]
    cases = []
    for name, p, max_norm in specs:
        tensors = [torch.randn(s, generator=gen) * 2.0 for s in shapes]
        if name == "l0":
            tensors[1][2] = 0.0  # one exact zero: torch's p = 0 counts per tensor, then tensors
        params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        for par, t in zip(params, tensors):
            par.grad = t.clone()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=p)
        cases.append({
            "name": name,
            "norm_type": p if math.isfinite(p) else ("inf" if p > 0 else "-inf"),
            "max_norm": max_norm,
            "shapes": [list(s) for s in shapes],
            "grads": [flat(t) for t in tensors],
            "total_norm": float(total),
            "clipped": [flat(par.grad) for par in params],
        })
    return cases


def baseline_cases():
    gen = torch.Generator().manual_seed(5)
    p0 = torch.randn(5, 7, generator=gen)
    grads = [torch.randn(5, 7, generator=gen) for _ in range(4)]
    out = []
    for name, make in [("sgd_momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
                       ("adam", lambda ps: torch.optim.Adam(ps, lr=0.01))]:
        p = torch.nn.Parameter(p0.clone())
        opt = make([p])
        traj = []
        for g in grads:
            p.grad = g.clone()
            opt.step()
            traj.append(flat(p))
        out.append({"name": name, "shape": [5, 7], "param0": flat(p0),
                    "grads": [flat(g) for g in grads], "params": traj})
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    meta = {"generator": "scripts/gen_optim_fixtures.py", "torch": torch.__version__,
            "numpy": np.__version__}
    files = {
        "newton_schulz.json": newton_schulz_cases(),
        "muon.json": muon_cases(),
        "clip_grad_norm.json": clip_cases(),
        "baselines.json": baseline_cases(),
    }
    for fname, cases in files.items():
        with open(os.path.join(OUT, fname), "w") as f:
            json.dump({"meta": meta, "cases": cases}, f)
            f.write("\n")
        print(f"{fname}: {len(cases)} cases")


if __name__ == "__main__":
    main()
