"""Parameter counts from transformers itself, for tests/params.rs.

Each config is instantiated on the meta device (no memory is allocated) with
AutoModelForCausalLM.from_config, and every parameter plus every persistent buffer (what a
checkpoint stores, e.g. DeepSeek-V3's e_score_correction_bias) is counted, by category.
Run: /work/pyenv/bin/python scripts/gen_params_fixtures.py
Writes tests/fixtures/params/<name>.config.json (variants only) and counts.json.
Generated with transformers 5.24.0, torch 2.15.0 (recorded in counts.json).
"""
import json
import os

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(__file__), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "params")

# Small configs that exercise code paths the four published ones do not.
VARIANTS = {
    # Qwen3-0.6B-like: tied embeddings.
    "qwen3-tied": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
                   "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                   "tie_word_embeddings": True, "attention_bias": False},
    # Qwen3-MoE with every other layer sparse, layer 0 forced dense, attention biases.
    "qwen3-moe-step2": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                        "hidden_size": 512, "intermediate_size": 1536, "moe_intermediate_size": 256,
                        "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 2,
                        "head_dim": 96, "num_experts": 16, "num_experts_per_tok": 4,
                        "decoder_sparse_step": 2, "mlp_only_layers": [1], "vocab_size": 1000,
                        "tie_word_embeddings": False, "attention_bias": True, "norm_topk_prob": True},
    # OLMoE-1B-7B's shape (transformers' OlmoeConfig defaults are that model's values).
    "olmoe-1b-7b": {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "vocab_size": 50304,
                    "hidden_size": 2048, "intermediate_size": 1024, "num_hidden_layers": 16,
                    "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64,
                    "num_experts_per_tok": 8, "norm_topk_prob": False, "tie_word_embeddings": False,
                    "attention_bias": False},
    # DeepSeek-V3 shape without the query LoRA (q_lora_rank null, as DeepSeek-V2-Lite).
    "deepseek-v3-noqlora": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                            "hidden_size": 1024, "intermediate_size": 2816, "moe_intermediate_size": 512,
                            "num_hidden_layers": 5, "num_attention_heads": 16, "num_key_value_heads": 16,
                            "q_lora_rank": None, "kv_lora_rank": 256, "qk_nope_head_dim": 64,
                            "qk_rope_head_dim": 32, "v_head_dim": 64, "n_routed_experts": 32,
                            "n_shared_experts": 2, "num_experts_per_tok": 6, "n_group": 4, "topk_group": 2,
                            "first_k_dense_replace": 1, "moe_layer_freq": 1, "vocab_size": 5000,
                            "tie_word_embeddings": False, "num_nextn_predict_layers": 0},
    # Mixtral-like with an explicit head_dim different from hidden/heads.
    "mixtral-headdim": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                        "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 4,
                        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 160,
                        "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 3000,
                        "tie_word_embeddings": True},
    # OLMoE with a head_dim that is not hidden/heads: q_norm/k_norm still follow hidden_size.
    "olmoe-headdim": {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "vocab_size": 3000,
                      "hidden_size": 512, "intermediate_size": 256, "num_hidden_layers": 3,
                      "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 96, "num_experts": 16,
                      "num_experts_per_tok": 4, "attention_bias": True},
    # DeepSeek-V2-Lite's shape (no query LoRA, 64 routed + 2 shared experts, first layer dense).
    "deepseek-v2-lite": {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
                         "vocab_size": 102400, "hidden_size": 2048, "intermediate_size": 10944,
                         "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
                         "num_key_value_heads": 16, "q_lora_rank": None, "kv_lora_rank": 512,
                         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                         "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                         "first_k_dense_replace": 1, "moe_layer_freq": 1, "topk_method": "greedy",
                         "tie_word_embeddings": False},
    # Dense families sharing the code path: Qwen2 (q/k/v biases), Llama (all biases), Mistral.
    "qwen2-small": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
                    "intermediate_size": 4864, "num_hidden_layers": 3, "num_attention_heads": 14,
                    "num_key_value_heads": 2, "vocab_size": 2000, "tie_word_embeddings": True},
    "llama-bias": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
                   "intermediate_size": 1376, "num_hidden_layers": 3, "num_attention_heads": 8,
                   "vocab_size": 2000, "attention_bias": True, "mlp_bias": True},
    "mistral-small": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 640,
                      "intermediate_size": 1792, "num_hidden_layers": 2, "num_attention_heads": 10,
                      "num_key_value_heads": 5, "head_dim": 128, "vocab_size": 2000},
}


def category(name):
    if "embed_tokens" in name:
        return "embedding"
    if name.startswith("lm_head"):
        return "lm_head"
    if "norm" in name.split(".")[-2] or name.split(".")[-2].endswith("layernorm"):
        return "norm"
    if "self_attn" in name:
        return "attention"
    if "shared_expert" in name:
        return "shared_experts"
    if ".experts." in name or name.endswith(".experts.gate_up_proj") or name.endswith(".experts.down_proj"):
        return "experts"
    if ".gate." in name and "mlp" in name:
        return "router"
    if "block_sparse_moe.gate" in name:
        return "router"
    if "mlp" in name:
        return "dense_mlp"
    raise ValueError(name)


def count(config_dict):
    cfg = AutoConfig.for_model(**config_dict)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    persistent = set(model.state_dict().keys())
    out = {}
    for name, p in model.named_parameters():
        c = category(name)
        out[c] = out.get(c, 0) + p.numel()
    for name, b in model.named_buffers():
        if name in persistent:
            c = category(name)
            out[c] = out.get(c, 0) + b.numel()
    out["total"] = sum(v for k, v in out.items())
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    results = {}
    for fname in sorted(os.listdir(os.path.join(ROOT, "data", "configs"))):
        if not fname.endswith(".json"):
            continue
        with open(os.path.join(ROOT, "data", "configs", fname)) as f:
            d = json.load(f)
        d.pop("architectures", None)
        results["data/configs/" + fname] = count(d)
    for name, d in VARIANTS.items():
        path = os.path.join(OUT, f"{name}.config.json")
        with open(path, "w") as f:
            json.dump(d, f, indent=2)
        d = dict(d)
        d.pop("architectures", None)
        results[f"tests/fixtures/params/{name}.config.json"] = count(d)
    with open(os.path.join(OUT, "counts.json"), "w") as f:
        json.dump({"generator": "scripts/gen_params_fixtures.py",
                   "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
                   "counts": results}, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
