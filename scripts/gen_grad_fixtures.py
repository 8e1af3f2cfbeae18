#!/usr/bin/env python3
"""Fixtures for chapter 12 (training): gradients as PyTorch's autograd computes them, for
the hand-written backward passes of src/train/.

Run:  /work/peers/py/bin/python scripts/gen_grad_fixtures.py [blocks] [models] [CASE ...]
Uses: torch 2.15.0, transformers 5.24.0, safetensors 0.8, numpy (versions written into
tests/fixtures/grad/versions.json). Every random draw comes from a fixed seed.

Part 1, tests/fixtures/grad/blocks/<block>.safetensors: one block of the forward pass at a
time, in float64. Inputs and weights are drawn at random, an upstream gradient dy is drawn
at random, the scalar loss is sum(y * dy), and torch's autograd gives the gradient of every
input and weight (named d<input>). Where transformers has the block as a module or function
(Qwen3MoeMLP, Qwen3MoeSparseMoeBlock, load_balancing_loss_func, ForCausalLMLoss,
apply_rotary_pos_emb, the RoPE init functions) it is transformers' own code that runs.
Where transformers' code casts to float32 inside (Qwen3MoeRMSNorm, eager_attention_forward's
softmax), the same torch operations are written out here in float64 and checked against
transformers' module to float32 accuracy, so the stored gradient is exact to float64.
tests/fixtures/grad/blocks/README.md lists every tensor.

Part 2, tests/fixtures/grad/models/<case>/: tiny random checkpoints written by
transformers' `save_pretrained` (f32), the ids, and expected.safetensors: "loss",
"ce_loss", "aux_loss" (MoE) and the gradient of every parameter under the checkpoint's own
tensor names, from `model.double()` and `model(input_ids=ids, labels=ids)`.
"""

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
from transformers.loss.loss_utils import ForCausalLMLoss
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.qwen3_moe import modeling_qwen3_moe as hf_moe

transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "grad"
F64 = torch.float64

VERSIONS = {
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "safetensors": safetensors.__version__,
    "numpy": np.__version__,
}


def randn(g, *shape, std=1.0):
    return (std * torch.randn(*shape, generator=g, dtype=F64)).requires_grad_(True)


def scalar(v):
    return torch.tensor([float(v)], dtype=F64)


def write_block(name, tensors):
    out = {}
    for k, t in tensors.items():
        t = t.detach()
        out[k] = t.contiguous() if t.dtype in (F64, torch.int64) else t.to(F64).contiguous()
    save_file(out, OUT / "blocks" / f"{name}.safetensors", metadata={"block": name})
    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in out.items())
    print(f"blocks/{name}: {shapes}")


def backward_with(y, dy):
    """loss = Σ y·dy; backward; returns the loss."""
    loss = (y * dy).sum()
    loss.backward()
    return loss


# ---------------------------------------------------------------------------------------
# Part 1: blocks


def block_rmsnorm(g):
    T, D, eps = 5, 16, 1e-6
    x = randn(g, T, D)
    w = (1.0 + 0.2 * torch.randn(D, generator=g, dtype=F64)).requires_grad_(True)
    y = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    # transformers' module (it computes in float32) agrees to float32 accuracy.
    m = hf_moe.Qwen3MoeRMSNorm(D, eps=eps)
    with torch.no_grad():
        m.weight.copy_(w.float())
        y32 = m(x.detach().float())
    assert float((y32.double() - y).abs().max()) < 1e-5
    dy = torch.randn(T, D, generator=g, dtype=F64)
    loss = backward_with(y, dy)
    write_block("rmsnorm", dict(x=x, w=w, eps=scalar(eps), dy=dy, y=y, loss=loss.reshape(1),
                                dx=x.grad, dw=w.grad))


def rope_inv_freq(rope_parameters, head_dim, max_pos):
    cfg = Qwen3MoeConfig(
        hidden_size=head_dim * 2, num_attention_heads=2, num_key_value_heads=1, head_dim=head_dim,
        max_position_embeddings=max_pos, rope_parameters=rope_parameters,
    )
    kind = rope_parameters["rope_type"]
    if kind == "default":
        inv_freq, factor = hf_moe.Qwen3MoeRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        inv_freq, factor = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")
    return inv_freq.to(F64), float(factor)


def block_rope(g, name, rope_parameters, positions):
    T, H, d = len(positions), 3, 8
    inv_freq, attention_factor = rope_inv_freq(rope_parameters, d, 64)
    pos = torch.tensor(positions, dtype=torch.int64)
    # As Qwen3MoeRotaryEmbedding.forward: freqs = pos ⊗ inv_freq, emb = cat(freqs, freqs).
    freqs = pos.to(F64)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos() * attention_factor, emb.sin() * attention_factor
    x = randn(g, T, H, d)
    # transformers' apply_rotary_pos_emb on [T, H, d]: cos/sin [T, d] broadcast over heads.
    y, _ = hf_moe.apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=1)
    dy = torch.randn(T, H, d, generator=g, dtype=F64)
    loss = backward_with(y, dy)
    write_block(name, dict(x=x, positions=pos, inv_freq=inv_freq,
                           attention_factor=scalar(attention_factor), dy=dy, y=y,
                           loss=loss.reshape(1), dx=x.grad))
    return dict(rope_parameters=rope_parameters, head_dim=d, max_position_embeddings=64)


class _Groups:
    """What eager_attention_forward reads off its module."""

    def __init__(self, groups):
        self.num_key_value_groups = groups
        self.training = False


def block_attention(g, name, window):
    H, Hkv, T, d = 4, 2, 7, 8
    scale = d ** -0.5
    q, k, v = randn(g, H, T, d), randn(g, Hkv, T, d), randn(g, Hkv, T, d)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    visible = j <= i
    if window:
        visible &= j > i - window  # transformers' sliding_window_overlay: kv > q − window
    mask = torch.where(visible, 0.0, float("-inf")).to(F64)
    rep = H // Hkv
    # eager_attention_forward's operations in float64 (it takes the softmax in float32).
    ks = hf_moe.repeat_kv(k[None], rep)[0]
    vs = hf_moe.repeat_kv(v[None], rep)[0]
    scores = torch.matmul(q, ks.transpose(1, 2)) * scale + mask
    probs = torch.softmax(scores, dim=-1)
    y = torch.matmul(probs, vs)  # [H, T, d], before transformers' transpose to [T, H, d]
    with torch.no_grad():
        ref, _ = hf_moe.eager_attention_forward(
            _Groups(rep), q[None].float(), k[None].float(), v[None].float(),
            mask[None, None].float(), scale)
    assert float((ref[0].transpose(0, 1).double() - y).abs().max()) < 1e-5
    dy = torch.randn(H, T, d, generator=g, dtype=F64)
    loss = backward_with(y, dy)
    write_block(name, dict(q=q, k=k, v=v, scale=scalar(scale), window=scalar(window),
                           dy=dy, y=y, probs=probs, loss=loss.reshape(1),
                           dq=q.grad, dk=k.grad, dv=v.grad))


def block_softmax(g):
    x = randn(g, 4, 9, std=2.0)
    y = torch.softmax(x, dim=-1)
    dy = torch.randn(4, 9, generator=g, dtype=F64)
    loss = backward_with(y, dy)
    write_block("softmax", dict(x=x, dy=dy, y=y, loss=loss.reshape(1), dx=x.grad))


def tiny_moe_config(**kw):
    base = dict(vocab_size=32, hidden_size=12, intermediate_size=20, moe_intermediate_size=10,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                num_experts=6, num_experts_per_tok=2, experts_implementation="eager")
    base.update(kw)
    return Qwen3MoeConfig(**base)


def block_swiglu(g):
    T = 5
    cfg = tiny_moe_config()
    mlp = hf_moe.Qwen3MoeMLP(cfg).to(F64)
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=F64))
    x = randn(g, T, cfg.hidden_size)
    y = mlp(x)
    dy = torch.randn(y.shape, generator=g, dtype=F64)
    loss = backward_with(y, dy)
    write_block("swiglu", dict(
        x=x, gate_w=mlp.gate_proj.weight, up_w=mlp.up_proj.weight, down_w=mlp.down_proj.weight,
        dy=dy, y=y, loss=loss.reshape(1), dx=x.grad, dgate_w=mlp.gate_proj.weight.grad,
        dup_w=mlp.up_proj.weight.grad, ddown_w=mlp.down_proj.weight.grad))


def router_gap(logits, k):
    s = torch.sort(logits.detach(), dim=-1, descending=True).values
    return float((s[..., k - 1] - s[..., k]).min())


def block_moe(g, name, norm_topk_prob):
    T = 9
    cfg = tiny_moe_config(norm_topk_prob=norm_topk_prob, num_experts_per_tok=3)
    for _ in range(100):
        block = hf_moe.Qwen3MoeSparseMoeBlock(cfg).to(F64)
        with torch.no_grad():
            for p in block.parameters():
                p.copy_(0.4 * torch.randn(p.shape, generator=g, dtype=F64))
        x = randn(g, 1, T, cfg.hidden_size)
        logits = x.detach()[0] @ block.gate.weight.detach().T
        if router_gap(logits, cfg.num_experts_per_tok) > 1e-2:
            break
    else:
        sys.exit(f"{name}: no draw with a wide router margin")
    y = block(x)
    _, weights, idx = block.gate(x.detach()[0])
    dy = torch.randn(y.shape, generator=g, dtype=F64)
    loss = backward_with(y, dy)
    write_block(name, dict(
        x=x[0], router_w=block.gate.weight, gate_up=block.experts.gate_up_proj,
        down=block.experts.down_proj, top_k=scalar(cfg.num_experts_per_tok),
        norm_topk_prob=scalar(1.0 if norm_topk_prob else 0.0), dy=dy[0], y=y[0],
        router_logits=logits, topk_idx=idx.to(torch.int64), topk_w=weights,
        loss=loss.reshape(1), dx=x.grad[0], drouter_w=block.gate.weight.grad,
        dgate_up=block.experts.gate_up_proj.grad, ddown=block.experts.down_proj.grad))


def block_load_balancing(g):
    L, T, E, k = 2, 10, 6, 2
    for _ in range(100):
        logits = randn(g, L, T, E, std=1.5)
        if router_gap(logits, k) > 1e-2:
            break
    aux = hf_moe.load_balancing_loss_func(tuple(logits[i] for i in range(L)), E, k)
    aux.backward()
    write_block("load_balancing", dict(router_logits=logits, top_k=scalar(k), aux=aux.reshape(1),
                                       drouter_logits=logits.grad))


def block_z_loss(g):
    logits = randn(g, 10, 6, std=2.0)
    z = (torch.logsumexp(logits, dim=-1) ** 2).mean()
    z.backward()
    write_block("z_loss", dict(router_logits=logits, z=z.reshape(1), drouter_logits=logits.grad))


def block_cross_entropy(g):
    B, T, V = 2, 6, 11
    logits = randn(g, B, T, V, std=2.0)
    labels = torch.randint(0, V, (B, T), generator=g)
    loss = ForCausalLMLoss(logits, labels, V)  # shifts the labels, mean over B·(T−1)
    # (it computes in float32; recomputed in float64 for the stored values)
    shifted = labels[:, 1:].reshape(-1)
    loss64 = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), shifted)
    assert abs(float(loss) - float(loss64)) < 1e-5
    loss64.backward()
    write_block("cross_entropy", dict(logits=logits, labels=labels, loss=loss64.reshape(1),
                                      dlogits=logits.grad))


def build_blocks():
    (OUT / "blocks").mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(12)
    block_rmsnorm(g)
    rope = {
        "rope_default": block_rope(g, "rope_default", {"rope_type": "default", "rope_theta": 10000.0},
                                   [0, 1, 2, 5, 17, 40]),
        "rope_yarn": block_rope(g, "rope_yarn", {"rope_type": "yarn", "rope_theta": 10000.0,
                                                 "factor": 4.0,
                                                 "original_max_position_embeddings": 16},
                                [0, 3, 15, 16, 33, 63]),
    }
    block_attention(g, "attention_causal", 0)
    block_attention(g, "attention_sliding", 3)
    block_softmax(g)
    block_swiglu(g)
    block_moe(g, "moe_norm_topk", True)
    block_moe(g, "moe_no_norm", False)
    block_load_balancing(g)
    block_z_loss(g)
    block_cross_entropy(g)
    (OUT / "blocks" / "rope_configs.json").write_text(json.dumps(rope, indent=1) + "\n")


# ---------------------------------------------------------------------------------------
# Part 2: whole models

MODEL_BASE = dict(
    vocab_size=96,
    hidden_size=24,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,  # 4 × 8 = 32 ≠ hidden 24, as in Qwen3-30B-A3B
    moe_intermediate_size=12,
    num_experts=6,
    num_experts_per_tok=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    norm_topk_prob=True,
    initializer_range=0.25,
    output_router_logits=True,
    router_aux_loss_coef=0.01,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)
MIN_ROUTER_GAP = 1e-3  # k-th minus (k+1)-th router logit at every MoE layer and position
SEQ_LEN = 12

# name: (config overrides, options)
MODEL_CASES = {
    "moe_norm_topk_aux": (dict(), dict(note="norm_topk_prob true; aux loss on (coef 0.01)")),
    "moe_no_norm_no_aux": (
        dict(norm_topk_prob=False, output_router_logits=False, num_experts=8, num_experts_per_tok=3,
             decoder_sparse_step=2),
        dict(note="norm_topk_prob false, 8 experts top-3, decoder_sparse_step 2 (layer 0 dense, "
                  "1 MoE); output_router_logits false: no aux loss"),
    ),
    "moe_no_norm_aux": (
        dict(norm_topk_prob=False),
        dict(note="norm_topk_prob false; aux loss on"),
    ),
    "moe_mixed_layers": (
        dict(num_hidden_layers=3, mlp_only_layers=[1]),
        dict(note="mlp_only_layers [1]: layers 0 and 2 MoE (aux pooled over both), 1 dense"),
    ),
    "moe_tied": (
        dict(tie_word_embeddings=True),
        dict(note="tie_word_embeddings: no lm_head.weight; aux on"),
    ),
    "moe_fused": (
        dict(),
        dict(fused=True, note="fused experts in the file: gate_up_proj [E, 2I, H], down_proj [E, H, I]"),
    ),
    "moe_yarn_sliding": (
        dict(
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 8},
            use_sliding_window=True,
            sliding_window=5,
            attention_bias=True,
        ),
        dict(note="YaRN factor 4 over an original 8, attention biases, sliding window 5 on 12 ids",
             must_change={"use_sliding_window": False,
                          "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    ),
    "moe_batch2": (
        dict(),
        dict(batch=2, note="a batch of 2 sequences ([2, 12], no padding): the mean over all "
                           "22 predicted positions, aux loss pooled over all 24 rows"),
    ),
    "dense": (dict(), dict(dense=True, note="dense Qwen3ForCausalLM, untied")),
    "dense_tied_sliding": (
        dict(num_hidden_layers=3, tie_word_embeddings=True, use_sliding_window=True,
             sliding_window=4, max_window_layers=1),
        dict(dense=True, note="dense Qwen3, tied; layers ≥ 1 use a sliding window of 4",
             must_change={"use_sliding_window": False}),
    ),
    "dense_linear_rope": (
        dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
             attention_bias=True),
        dict(dense=True, note="dense Qwen3 with linear RoPE scaling (factor 2) and attention biases",
             must_change={"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    ),
}

# Each case's first seed (fixed per case, so adding a case leaves the others' files alone).
MODEL_SEEDS = {
    "dense": 2000, "dense_linear_rope": 2100, "dense_tied_sliding": 2200, "moe_fused": 2300,
    "moe_mixed_layers": 2400, "moe_no_norm_aux": 2500, "moe_no_norm_no_aux": 2600,
    "moe_norm_topk_aux": 2700, "moe_tied": 2800, "moe_yarn_sliding": 2900, "moe_batch2": 3000,
}


def make_model_config(overrides, dense):
    kw = dict(MODEL_BASE)
    kw.update(overrides)
    if dense:
        for k in ["moe_intermediate_size", "num_experts", "num_experts_per_tok", "norm_topk_prob",
                  "output_router_logits", "router_aux_loss_coef"]:
            kw.pop(k)
        return Qwen3Config(**kw), Qwen3ForCausalLM
    kw["experts_implementation"] = "eager"
    return Qwen3MoeConfig(**kw), Qwen3MoeForCausalLM


def randomise(model, seed, std):
    """Every parameter drawn anew: matrices N(0, std²), norm weights 1 + N(0, 0.2²),
    biases N(0, 0.1²) — so a missing norm or a swapped gate/up shows in every gradient."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(std * noise)


def fuse_experts(directory):
    """Rewrites save_pretrained's per-expert tensors into transformers 5's fused layout."""
    path = directory / "model.safetensors"
    tensors = load_file(path)
    out = {k: v for k, v in tensors.items() if ".mlp.experts." not in k}
    layers = sorted({int(k.split(".")[2]) for k in tensors if ".mlp.experts." in k})
    for layer in layers:
        pre = f"model.layers.{layer}.mlp.experts"
        n = len({k.split(".")[5] for k in tensors if k.startswith(pre + ".")})
        out[f"{pre}.gate_up_proj"] = torch.stack([
            torch.cat([tensors[f"{pre}.{e}.gate_proj.weight"], tensors[f"{pre}.{e}.up_proj.weight"]])
            for e in range(n)]).contiguous()
        out[f"{pre}.down_proj"] = torch.stack(
            [tensors[f"{pre}.{e}.down_proj.weight"] for e in range(n)]).contiguous()
    save_file(out, path, metadata={"format": "pt"})


def file_gradients(model, names):
    """The gradient of every tensor the checkpoint file holds, under the file's names.
    transformers 5 keeps experts fused in memory (gate_up_proj [E, 2I, H], down_proj
    [E, H, I]); a per-expert file's gradients are the slices of the fused gradient."""
    params = dict(model.named_parameters())
    out = {}
    for name in names:
        if name in params:
            out[name] = params[name].grad
            continue
        parts = name.split(".")  # model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight
        assert parts[4] == "experts" and parts[-1] == "weight", name
        pre, e, proj = ".".join(parts[:5]), int(parts[5]), parts[6]
        if proj == "down_proj":
            out[name] = params[f"{pre}.down_proj"].grad[e]
        else:
            gu = params[f"{pre}.gate_up_proj"].grad[e]
            half = gu.shape[0] // 2
            out[name] = gu[:half] if proj == "gate_proj" else gu[half:]
    return out


def moe_router_gap(model, ids):
    with torch.no_grad():
        out = model(ids, output_router_logits=True)
    k = model.config.num_experts_per_tok
    return min(router_gap(rl, k) for rl in out.router_logits)


def build_model_case(name, overrides, opts):
    out_dir = OUT / "models" / name
    dense = opts.get("dense", False)
    config, model_cls = make_model_config(overrides, dense)
    base_seed = MODEL_SEEDS[name]
    for attempt in range(50):
        seed = base_seed + attempt
        torch.manual_seed(seed)
        model = model_cls(config)
        randomise(model, seed, config.initializer_range)
        rng = np.random.default_rng(seed)
        rows = opts.get("batch", 1)
        batch = [[int(x) for x in rng.integers(0, config.vocab_size, SEQ_LEN)] for _ in range(rows)]
        ids = batch[0]
        t = torch.tensor(batch)
        gap = math.inf if dense else moe_router_gap(model, t)
        if gap >= MIN_ROUTER_GAP:
            break
        print(f"  {name}: seed {seed} router gap {gap:.1e}, next seed")
    else:
        sys.exit(f"{name}: no seed with a wide enough router margin")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir)
    (out_dir / "generation_config.json").unlink(missing_ok=True)
    if opts.get("fused"):
        fuse_experts(out_dir)
    stored = load_file(out_dir / "model.safetensors")

    # The reference: transformers reads the file back, in float64.
    ref = model_cls.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager",
                                    **({} if dense else {"experts_implementation": "eager"}))
    ref = ref.double()
    # transformers read every tensor back as it was (a fused file included).
    mine = dict(model.named_parameters())
    for k, v in ref.named_parameters():
        assert torch.equal(v, mine[k].detach().double()), f"{name}: {k} read back differently"
    ref.train(False)  # dropout is 0 in these configs; eval() changes nothing else
    ref.zero_grad()
    out = ref(input_ids=t, labels=t)
    out.loss.backward()
    loss = out.loss.detach()
    ce = ForCausalLMLoss(out.logits.detach(), t, config.vocab_size)
    expected = {"loss": out.loss.detach().reshape(()), "ce_loss": ce.detach().to(F64).reshape(())}
    aux_on = not dense and config.output_router_logits
    if aux_on:
        expected["aux_loss"] = out.aux_loss.detach().to(F64).reshape(())
        recombined = float(ce) + config.router_aux_loss_coef * float(out.aux_loss.detach())
        assert abs(recombined - float(loss)) < 1e-6, name
    else:
        assert abs(float(ce) - float(loss)) < 1e-6, name
    for key, value in opts.get("must_change", {}).items():
        # The feature is live: switching it off changes the loss.
        other = dict(overrides, **{key: value})
        cfg2, _ = make_model_config(other, dense)
        m2 = model_cls(cfg2)
        m2.load_state_dict(model.state_dict())
        with torch.no_grad():
            loss2 = m2.double()(input_ids=t, labels=t).loss
        assert abs(float(loss2) - float(loss)) > 1e-4, f"{name}: {key} has no effect"
    grads = file_gradients(ref, stored.keys())
    for k, gt in grads.items():
        assert gt is not None and gt.shape == stored[k].shape, k
        expected[k] = gt.detach()
    save_file({k: v.float().contiguous() for k, v in expected.items()},
              out_dir / "expected.safetensors")
    meta = {
        "case": name,
        "note": opts["note"],
        "model_class": model_cls.__name__,
        "seed": seed,
        "ids": ids,
        "batch": batch,  # the sequences of `model(input_ids=batch, labels=batch)`
        "loss": float(loss),
        "ce_loss": float(ce),
        "aux_loss": float(out.aux_loss.detach()) if aux_on else None,
        "min_router_gap": None if dense else gap,
        "expert_layout": "fused" if opts.get("fused") else ("per-expert" if not dense else None),
        "versions": VERSIONS,
    }
    (out_dir / "ids.json").write_text(json.dumps(meta, indent=1) + "\n")
    size = sum(f.stat().st_size for f in out_dir.iterdir())
    print(f"models/{name}: seed {seed}, {size / 1024:.0f} KiB, loss {float(loss):.5f}, "
          f"{len(grads)} gradients")


def build_models(cases):
    (OUT / "models").mkdir(parents=True, exist_ok=True)
    for name, (overrides, opts) in MODEL_CASES.items():
        if not cases or name in cases:
            build_model_case(name, overrides, opts)


def main():
    torch.set_num_threads(1)
    args = sys.argv[1:]
    parts = [a for a in args if a in ("blocks", "models")] or ["blocks", "models"]
    cases = [a for a in args if a not in ("blocks", "models")]
    OUT.mkdir(parents=True, exist_ok=True)
    if "blocks" in parts:
        build_blocks()
    if "models" in parts:
        build_models(cases)
    (OUT / "versions.json").write_text(json.dumps(VERSIONS, indent=1) + "\n")


if __name__ == "__main__":
    main()
