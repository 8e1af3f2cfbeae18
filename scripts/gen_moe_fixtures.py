"""Fixtures for tests/moe.rs: transformers' own sparse-MoE blocks and routers in f32.

Run: /work/pyenv/bin/python scripts/gen_moe_fixtures.py
Writes tests/fixtures/moe/sparse_moe_blocks.json, deepseek_router.json, aux_loss.json.
Library versions are recorded in each file (generated with transformers 5.24.0, torch 2.15.0).
"""
import json
import os

import torch
import transformers
from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
from transformers.models.mixtral.configuration_mixtral import MixtralConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
from transformers.models.olmoe.configuration_olmoe import OlmoeConfig
from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock
from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import (
    Qwen3MoeSparseMoeBlock,
    load_balancing_loss_func,
)

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "moe")
VERSIONS = {"transformers": transformers.__version__, "torch": torch.__version__}


def tolist(t):
    return t.detach().to(torch.float32).tolist()


def block_case(name, block, cfg_h, cfg_i, n_exp, k, norm, tokens, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        block.gate.weight.copy_(torch.randn_like(block.gate.weight))
        block.experts.gate_up_proj.copy_(torch.randn_like(block.experts.gate_up_proj) * 0.5)
        block.experts.down_proj.copy_(torch.randn_like(block.experts.down_proj) * 0.5)
        x = torch.randn(1, tokens, cfg_h)
        y = block(x)
        _, scores, idx = block.gate(x.view(-1, cfg_h))
    gate_up = block.experts.gate_up_proj
    return {
        "name": name,
        "hidden_size": cfg_h,
        "moe_intermediate_size": cfg_i,
        "num_experts": n_exp,
        "top_k": k,
        "norm_topk_prob": norm,
        "router": tolist(block.gate.weight),
        "gate_proj": tolist(gate_up[:, :cfg_i, :]),
        "up_proj": tolist(gate_up[:, cfg_i:, :]),
        "down_proj": tolist(block.experts.down_proj),
        "x": tolist(x[0]),
        "y": tolist(y[0]),
        "router_indices": idx.tolist(),
        "router_scores": tolist(scores),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.set_default_dtype(torch.float32)
    cases = []
    h, i, e = 16, 12, 8
    for k, norm, seed in [(2, True, 1), (3, False, 2)]:
        cfg = Qwen3MoeConfig(hidden_size=h, moe_intermediate_size=i, num_experts=e,
                             num_experts_per_tok=k, norm_topk_prob=norm)
        cases.append(block_case(f"qwen3_moe k={k} norm={norm}", Qwen3MoeSparseMoeBlock(cfg).eval(),
                                h, i, e, k, norm, 7, seed))
    cfg = MixtralConfig(hidden_size=h, intermediate_size=i, num_local_experts=e, num_experts_per_tok=2)
    cases.append(block_case("mixtral k=2", MixtralSparseMoeBlock(cfg).eval(), h, i, e, 2, True, 7, 3))
    cfg = OlmoeConfig(hidden_size=h, intermediate_size=i, num_experts=e, num_experts_per_tok=4,
                      norm_topk_prob=False)
    cases.append(block_case("olmoe k=4", OlmoeSparseMoeBlock(cfg).eval(), h, i, e, 4, False, 7, 4))
    with open(os.path.join(OUT, "sparse_moe_blocks.json"), "w") as f:
        json.dump({"generator": "scripts/gen_moe_fixtures.py", "versions": VERSIONS, "cases": cases}, f)

    # DeepSeek-V3 router: 16 experts in 4 groups, top-2 groups, k = 4.
    cfg = DeepseekV3Config(hidden_size=h, n_routed_experts=16, num_experts_per_tok=4, n_group=4,
                           topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5)
    router = DeepseekV3TopkRouter(cfg).eval()
    torch.manual_seed(5)
    with torch.no_grad():
        router.weight.copy_(torch.randn_like(router.weight))
        router.e_score_correction_bias.copy_(torch.randn(16) * 0.3)
        x = torch.randn(9, h)
        _, scores, idx = router(x)
    with open(os.path.join(OUT, "deepseek_router.json"), "w") as f:
        json.dump({"generator": "scripts/gen_moe_fixtures.py", "versions": VERSIONS,
                   "hidden_size": h, "num_experts": 16, "top_k": 4, "n_group": 4, "topk_group": 2,
                   "norm_topk_prob": True, "routed_scaling_factor": 2.5,
                   "router": tolist(router.weight), "bias": tolist(router.e_score_correction_bias),
                   "x": tolist(x), "router_indices": idx.tolist(), "router_scores": tolist(scores)}, f)

    # Switch-style auxiliary loss as transformers computes it (one layer's logits).
    torch.manual_seed(6)
    cases = []
    for tokens, n, k, skew in [(32, 8, 2, 0.0), (32, 8, 2, 3.0), (50, 16, 4, 1.0)]:
        logits = torch.randn(tokens, n)
        logits[:, 0] += skew
        loss = load_balancing_loss_func((logits,), n, k)
        cases.append({"num_experts": n, "top_k": k, "logits": tolist(logits), "aux_loss": float(loss)})
    with open(os.path.join(OUT, "aux_loss.json"), "w") as f:
        json.dump({"generator": "scripts/gen_moe_fixtures.py", "versions": VERSIONS, "cases": cases}, f)


if __name__ == "__main__":
    main()
