#!/usr/bin/env python3
"""Fixtures for chapter 11 (GGUF and block quantisation): tiny random Hugging Face models
written to GGUF, quantised by llama.cpp, with the logits llama.cpp and transformers compute
on the quantised files.

Run:  PYTHONPATH=DIR /work/peers/py/bin/python scripts/gen_gguf_model_fixtures.py
      where DIR holds accelerate 1.15.0 + psutil (transformers refuses GGUF files without
      accelerate): `python -m pip install --no-deps --target DIR accelerate==1.15.0 psutil`
Uses: torch 2.15, transformers 5.24, numpy (this interpreter) and, in a child process run by
/work/peers/llama/bin/python, gguf 0.19.0 + llama-cpp-python 0.3.36 (llama.cpp vendored in
that sdist). The exact versions are written into manifest.json.

For each model (moe, moe_tied, qwen3, qwen2):
  1. a seeded random transformers model (float32) of the class named below;
  2. an F32 GGUF written with gguf-py's GGUFWriter under llama.cpp's tensor names and the
     metadata keys convert_hf_to_gguf.py writes for the architecture (tokenizer.ggml.model
     "none" + {arch}.vocab_size: llama.cpp then loads ids only);
  3. llama.cpp's quantiser (llama_model_quantize, no importance matrix) makes each file;
  4. llama.cpp's logits at every prompt position (logits_all, n_ctx 64, 2 threads);
  5. transformers' logits on the same file: from_pretrained(gguf_file=...) dequantises it
     through gguf-py and maps the names itself; the model's own config is passed so that
     what GGUF cannot say (norm_topk_prob) is the generating model's; computed in float64
     with eager attention.
The F32 GGUFs are not kept (tests/fixtures/gguf_models/PROVENANCE.md describes the layout).
"""

import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "gguf_models"
LLAMA_PY = "/work/peers/llama/bin/python"
LLAMA_SITE = Path("/work/peers/llama/lib/python3.11/site-packages")

PROMPT_SEED = 11
PROMPT_LEN = 16
VOCAB = 256
LOGIT_STD = 2.5

# llama.cpp's ftype numbers (enum llama_ftype).
FTYPES = {
    "q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9,
    "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "f16": 1, "bf16": 32,
}

# name: (class, config keywords, the files made, weight scales, note)
MODELS = {
    "moe": (
        "Qwen3MoeForCausalLM",
        dict(hidden_size=256, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
             head_dim=64, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=256,
             intermediate_size=512, norm_topk_prob=True, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m", "q5_k_m", "q6_k"],
        "every row a multiple of 256, so the K types are used as asked; one layer to keep the "
        "eight files small",
    ),
    "moe_tied": (
        "Qwen3MoeForCausalLM",
        dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=32, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
             intermediate_size=128, norm_topk_prob=False, tie_word_embeddings=True,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        ["q8_0", "q4_k_m", "q6_k", "bf16"],
        "rows of 128 and 64 (not multiples of 256): llama.cpp falls back from the K types; "
        "tied embeddings (no output.weight); norm_topk_prob false, which llama.cpp's qwen3moe "
        "graph ignores (it always renormalises the top-k weights): see hf_logits_norm_topk",
    ),
    "qwen3": (
        "Qwen3ForCausalLM",
        dict(hidden_size=256, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
             head_dim=64, intermediate_size=256, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        ["q8_0", "q4_k_m", "q6_k"],
        "dense Qwen3, rows of 256 (K types used)",
    ),
    "qwen2": (
        "Qwen2ForCausalLM",
        dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=256, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        ["q8_0", "q4_k_m", "q6_k", "f16"],
        "dense Qwen2 with q/k/v biases, rows of 128 (K types fall back)",
    ),
}
COMMON = dict(vocab_size=VOCAB, max_position_embeddings=256, rms_norm_eps=1e-6)


# ---------------------------------------------------------------------------------------
# The llama.cpp stage (run by /work/peers/llama/bin/python): GGUF writing, quantising,
# llama.cpp's logits and the type mix.
# ---------------------------------------------------------------------------------------

def gguf_names(state, cfg):
    """HF tensor name → (GGUF name, numpy array in row-major order)."""
    out = []
    for name, t in state.items():
        if name == "model.embed_tokens.weight":
            out.append(("token_embd.weight", t))
            continue
        if name == "model.norm.weight":
            out.append(("output_norm.weight", t))
            continue
        if name == "lm_head.weight":
            if not cfg.get("tie_word_embeddings"):
                out.append(("output.weight", t))
            continue
        parts = name.split(".")
        assert parts[0] == "model" and parts[1] == "layers", name
        blk = f"blk.{parts[2]}"
        rest = ".".join(parts[3:])
        simple = {
            "self_attn.q_proj.weight": "attn_q.weight",
            "self_attn.k_proj.weight": "attn_k.weight",
            "self_attn.v_proj.weight": "attn_v.weight",
            "self_attn.o_proj.weight": "attn_output.weight",
            "self_attn.q_proj.bias": "attn_q.bias",
            "self_attn.k_proj.bias": "attn_k.bias",
            "self_attn.v_proj.bias": "attn_v.bias",
            "self_attn.q_norm.weight": "attn_q_norm.weight",
            "self_attn.k_norm.weight": "attn_k_norm.weight",
            "input_layernorm.weight": "attn_norm.weight",
            "post_attention_layernorm.weight": "ffn_norm.weight",
            "mlp.gate.weight": "ffn_gate_inp.weight",
            "mlp.gate_proj.weight": "ffn_gate.weight",
            "mlp.up_proj.weight": "ffn_up.weight",
            "mlp.down_proj.weight": "ffn_down.weight",
            "mlp.experts.down_proj": "ffn_down_exps.weight",
        }
        if rest in simple:
            out.append((f"{blk}.{simple[rest]}", t))
        elif rest == "mlp.experts.gate_up_proj":
            # transformers 5 fuses [E, 2I, H] with gate first; GGUF keeps them apart.
            i = t.shape[1] // 2
            out.append((f"{blk}.ffn_gate_exps.weight", t[:, :i, :].copy()))
            out.append((f"{blk}.ffn_up_exps.weight", t[:, i:, :].copy()))
        else:
            raise ValueError(f"no GGUF name for {name}")
    return out


def write_f32_gguf(path, arch, cfg, tensors):
    """The metadata convert_hf_to_gguf.py writes for qwen2 / qwen3 / qwen3moe (TextModel's
    set_gguf_parameters, plus Qwen2MoeModel's expert_feed_forward_length), with no vocabulary."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"llm-anatomy fixture {path.stem}")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if "num_experts" in cfg:
        w.add_expert_count(cfg["num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if "head_dim" in cfg:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if "moe_intermediate_size" in cfg:
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model("none")
    w.add_vocab_size(cfg["vocab_size"])
    for name, t in tensors:
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_stage(job_path):
    import gguf
    import llama_cpp
    import numpy as np

    job = json.loads(Path(job_path).read_text())
    results = {"gguf": gguf.__version__ if hasattr(gguf, "__version__") else None,
               "llama_cpp_python": llama_cpp.__version__, "files": {}}
    from importlib.metadata import version
    results["gguf"] = version("gguf")
    for model in job["models"]:
        state = dict(np.load(model["weights"]))
        f32 = Path(model["dir"]) / "f32.gguf"
        write_f32_gguf(f32, model["arch"], model["config"], gguf_names(state, model["config"]))
        for kind in model["files"]:
            out = Path(model["dir"]) / f"{kind}.gguf"
            p = llama_cpp.llama_model_quantize_default_params()
            p.ftype = FTYPES[kind]
            p.nthread = 2
            rc = llama_cpp.llama_model_quantize(str(f32).encode(), str(out).encode(), ctypes.byref(p))
            assert rc == 0, f"llama_model_quantize {out}: {rc}"
            llm = llama_cpp.Llama(model_path=str(out), logits_all=True, n_ctx=64, n_threads=2,
                                  verbose=False)
            llm.eval(job["prompt"])
            logits = np.array(llm.scores[: len(job["prompt"])], dtype=np.float32)
            del llm
            np.save(Path(model["dir"]) / f"{kind}.llama_logits.npy", logits)
            reader = gguf.GGUFReader(str(out))
            types = {t.name: t.tensor_type.name for t in reader.tensors}
            results["files"][f"{model['name']}/{kind}.gguf"] = types
        f32.unlink()
    Path(job["results"]).write_text(json.dumps(results))


# ---------------------------------------------------------------------------------------
# The transformers stage (this interpreter).
# ---------------------------------------------------------------------------------------

def gguf_on_path(tmp):
    """transformers' GGUF loader needs the gguf package (pure Python): the llama
    environment's copy, linked alone into a directory on sys.path."""
    link_dir = Path(tmp) / "gguf_site"
    link_dir.mkdir()
    for entry in LLAMA_SITE.iterdir():
        if entry.name == "gguf" or (entry.name.startswith("gguf-") and entry.name.endswith(".dist-info")):
            (link_dir / entry.name).symlink_to(entry)
    sys.path.append(str(link_dir))


def randomise(model, seed, matrix_std):
    """Every parameter drawn anew from a seeded generator: matrices N(0, std²), norm weights
    1 + N(0, 0.1²), biases N(0, 0.1²), and the output matrix (lm_head, or the tied embedding)
    N(0, (LOGIT_STD² / hidden)): the final norm's output has an RMS near 1, so the logits
    spread by about LOGIT_STD, wide enough that the distributions are not one-hot and a KL
    divergence between two implementations means something. An untied embedding is N(0, 1)
    (the first RMS norm removes its scale)."""
    import torch

    out_std = LOGIT_STD / model.config.hidden_size ** 0.5
    tied = model.config.tie_word_embeddings

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif name == "lm_head.weight" or (tied and name == "model.embed_tokens.weight"):
                p.copy_(out_std * noise)
            elif name == "model.embed_tokens.weight":
                p.copy_(noise)
            else:
                p.copy_(matrix_std * noise)


def kl_mean(p_logits, q_logits):
    """Mean over positions of KL(P ‖ Q), P and Q the softmax of each row (float64)."""
    import numpy as np

    def log_softmax(x):
        x = x.astype(np.float64)
        m = x.max(axis=-1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))

    lp, lq = log_softmax(p_logits), log_softmax(q_logits)
    return float((np.exp(lp) * (lp - lq)).sum(axis=-1).mean())


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--llama-stage":
        llama_stage(sys.argv[2])
        return

    import numpy as np
    import torch
    import transformers

    tmp = tempfile.mkdtemp(prefix="gguf_models_")
    gguf_on_path(tmp)
    from transformers import AutoModelForCausalLM
    import transformers.models.qwen2 as q2
    import transformers.models.qwen3 as q3
    import transformers.models.qwen3_moe as q3m

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    classes = {"Qwen3MoeForCausalLM": (q3m.Qwen3MoeConfig, q3m.Qwen3MoeForCausalLM, "qwen3moe"),
               "Qwen3ForCausalLM": (q3.Qwen3Config, q3.Qwen3ForCausalLM, "qwen3"),
               "Qwen2ForCausalLM": (q2.Qwen2Config, q2.Qwen2ForCausalLM, "qwen2")}

    prompt = [int(i) for i in np.random.default_rng(PROMPT_SEED).integers(0, VOCAB, PROMPT_LEN)]
    OUT.mkdir(parents=True, exist_ok=True)
    jobs, configs = [], {}
    for seed, (name, (cls, kw, files, _note)) in enumerate(MODELS.items()):
        cfg_cls, model_cls, arch = classes[cls]
        cfg = cfg_cls(**COMMON, **kw, attn_implementation="eager")
        torch.manual_seed(seed)
        model = model_cls(cfg).eval()
        randomise(model, 100 + seed, matrix_std=0.08)
        if cfg.tie_word_embeddings:
            assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        d = OUT / name
        d.mkdir(exist_ok=True)
        (d / "prompt.json").write_text(json.dumps({"ids": prompt}) + "\n")
        weights = Path(tmp) / f"{name}.npz"
        np.savez(weights, **{k: v.detach().numpy() for k, v in model.state_dict().items()})
        cfg_dict = {**COMMON, **kw}
        configs[name] = cfg
        jobs.append({"name": name, "arch": arch, "config": cfg_dict, "files": files,
                     "weights": str(weights), "dir": str(d)})

    job_path = Path(tmp) / "job.json"
    results_path = Path(tmp) / "results.json"
    job_path.write_text(json.dumps({"models": jobs, "prompt": prompt, "results": str(results_path)}))
    subprocess.run([LLAMA_PY, __file__, "--llama-stage", str(job_path)], check=True)
    results = json.loads(results_path.read_text())

    ids = torch.tensor([prompt])
    manifest = {
        "generator": "scripts/gen_gguf_model_fixtures.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "gguf": results["gguf"],
                     "llama_cpp_python": results["llama_cpp_python"]},
        "prompt": prompt,
        "hf_compute": "float64, eager attention, weights dequantised by gguf-py via transformers",
        "models": {},
    }
    for name, (cls, kw, files, note) in MODELS.items():
        cfg = configs[name]
        entry = {"class": cls, "config": json.loads(cfg.to_json_string()), "note": note, "files": {}}
        for kind in files:
            rel = f"{name}/{kind}.gguf"
            path = OUT / rel
            variants = [("hf_logits", {})]
            if name == "moe_tied":
                variants.append(("hf_logits_norm_topk", {"norm_topk_prob": True}))
            kls = {}
            llama = np.load(OUT / name / f"{kind}.llama_logits.npy")
            for stem, override in variants:
                c = type(cfg).from_dict({**cfg.to_dict(), **override})
                # eager experts too: grouped_mm has no float64 kernel
                m = AutoModelForCausalLM.from_pretrained(
                    str(OUT / name), gguf_file=f"{kind}.gguf", config=c, dtype=torch.float32,
                    attn_implementation="eager", experts_implementation="eager")
                m = m.to(torch.float64).eval()
                with torch.no_grad():
                    hf = m(ids).logits[0].to(torch.float32).numpy()
                np.save(OUT / name / f"{kind}.{stem}.npy", hf)
                kls[stem] = kl_mean(hf, llama)
            entry["files"][f"{kind}.gguf"] = {
                "size": path.stat().st_size,
                "llama_logits": f"{kind}.llama_logits.npy",
                **{stem: f"{kind}.{stem}.npy" for stem, _ in variants},
                "kl_hf_to_llama_mean": kls["hf_logits"],
                **({"kl_hf_norm_topk_to_llama_mean": kls["hf_logits_norm_topk"]}
                   if "hf_logits_norm_topk" in kls else {}),
                "logits_std": float(llama.std()),
                "types": results["files"][rel],
            }
            print(f"{rel}: {path.stat().st_size} bytes, KL(hf‖llama) = {kls}", flush=True)
        manifest["models"][name] = entry
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"total {total} bytes under {OUT}")


if __name__ == "__main__":
    main()
