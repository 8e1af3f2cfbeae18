#!/usr/bin/env python3
"""The attention sink and the decay of post-RoPE scores on the two real models, measured by
transformers on the weights it dequantises from the GGUF files, for the claims real.sink,
real.decay and tok.bos_sink (src/claims/real.rs) and tests/suite/real_evidence.rs.

Run:  PYTHONPATH=target/peers/pyextra target/peers/py/bin/python scripts/gen_real_evidence.py
      after `bash scripts/get-real-models.sh` (pyextra: see scripts/gen_real_model_logits.py).

Per model (data/real/evidence-hf-<name>.json):
  sink  — for each snippet of SNIPPETS (read from src/qwen3/evidence.rs, so both sides run
          the same text), tokenised by the GGUF's tokenizer as transformers reads it, the
          eager attention weights of every layer and head: the mean weight on position 0 over
          query positions >= FIRST_QUERY, per layer, and the uniform share 1/(t+1) averaged
          over the same queries; the heads whose mean share exceeds 1/2; the ids of each
          snippet (our engine re-runs the first ones);
  decay — q and k as attention sees them (the outputs of apply_rotary_pos_emb, captured by
          wrapping it), mean q_t.k_{t-tau}/sqrt(d) per layer for tau < TAUS over the first
          WINDOW tokens of the first English and Chinese corpus file, beside
          S(tau) = sum_j cos(tau theta_j) for the model's head dimension and RoPE base.
"""

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "target" / "real-models"
OUT = ROOT / "data" / "real"
MODELS = {"smollm2": "smollm2-135m-instruct-q4_1.gguf", "gemma3": "gemma3-270m-q4_k_m.gguf"}
FIRST_QUERY = 4
WINDOW = 384
TAUS = 256
THREADS = 2


def snippets():
    """The string literals of `SNIPPETS` in src/qwen3/evidence.rs."""
    src = (ROOT / "src" / "qwen3" / "evidence.rs").read_text(encoding="utf-8")
    body = src.split("pub const SNIPPETS: &[&str] = &[", 1)[1].split("\n];", 1)[0]
    return [ast.literal_eval(m) for m in re.findall(r'^\s*("(?:[^"\\]|\\.)*"),\s*$', body, re.M)]


def corpus_windows(tok):
    out = []
    for lang in ("en", "zh"):
        first = sorted((ROOT / "data" / "corpus" / lang).iterdir())[0]
        ids = tok(first.read_text(encoding="utf-8"))["input_ids"]
        assert len(ids) >= WINDOW, first
        out.append(ids[:WINDOW])
    return out


def sink(model, tok, texts, torch):
    layers = model.config.num_hidden_layers
    heads = model.config.num_attention_heads
    acc = torch.zeros(layers, heads, dtype=torch.float64)
    uniform, queries, all_ids = 0.0, 0, []
    for text in texts:
        ids = tok(text)["input_ids"]
        all_ids.append(ids)
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True)
        for layer, a in enumerate(out.attentions):  # [1, heads, n, n]
            acc[layer] += a[0, :, FIRST_QUERY:, 0].double().sum(dim=1)
        for t in range(FIRST_QUERY, len(ids)):
            uniform += 1.0 / (t + 1)
            queries += 1
    per_head = acc / queries
    per_layer = per_head.mean(dim=1).tolist()
    return {
        "per_layer": per_layer,
        "mean": sum(per_layer) / layers,
        "uniform": uniform / queries,
        "heads_over_half": int((per_head > 0.5).sum()),
        "heads": layers * heads,
        "snippets": len(texts),
        "queries": queries,
        "ids": all_ids,
    }


def decay(model, windows, module, torch):
    captured = []
    original = module.apply_rotary_pos_emb

    def capture(q, k, *args, **kwargs):
        q, k = original(q, k, *args, **kwargs)
        captured.append((q[0].double(), k[0].double()))  # [heads, n, d], [kv_heads, n, d]
        return q, k

    module.apply_rotary_pos_emb = capture
    cfg = model.config
    layers = cfg.num_hidden_layers
    sums = torch.zeros(layers, TAUS, dtype=torch.float64)
    counts = torch.zeros(TAUS, dtype=torch.float64)
    try:
        for ids in windows:
            captured.clear()
            with torch.no_grad():
                model(torch.tensor([ids]))
            for layer, (q, k) in enumerate(captured):
                group = q.shape[0] // k.shape[0]
                k = k.repeat_interleave(group, dim=0)
                scores = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5  # [heads, n, n]
                for tau in range(TAUS):
                    diag = torch.diagonal(scores, offset=-tau, dim1=1, dim2=2)
                    sums[layer, tau] += diag.sum()
                    if layer == 0:
                        counts[tau] += diag.numel()
    finally:
        module.apply_rotary_pos_emb = original
    d = captured[0][0].shape[-1]
    params = getattr(cfg, "rope_parameters", None) or {"rope_theta": cfg.rope_theta}
    # Gemma 3 keeps one set per layer type; the prior is drawn for the global layers' base.
    params = params.get("full_attention", params)
    base = float(params["rope_theta"])
    theta = [base ** (-2 * j / d) for j in range(d // 2)]
    import math
    prior = [sum(math.cos(tau * t) for t in theta) for tau in range(TAUS)]
    return {"taus": TAUS, "per_layer": (sums / counts).tolist(), "prior": prior,
            "rope_base": base, "window": WINDOW}


def main():
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(THREADS)
    texts = snippets()
    assert len(texts) >= 20, len(texts)
    only = sys.argv[1:] or list(MODELS)
    for name in only:
        file = MODELS[name]
        if not (MODELS_DIR / file).exists():
            sys.exit(f"{MODELS_DIR / file}: missing (bash scripts/get-real-models.sh)")
        tok = AutoTokenizer.from_pretrained(str(MODELS_DIR), gguf_file=file)
        model = AutoModelForCausalLM.from_pretrained(
            str(MODELS_DIR), gguf_file=file, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        module = sys.modules[type(model.model.layers[0].self_attn).__module__]
        doc = {
            "model": file,
            "how": "PYTHONPATH=target/peers/pyextra target/peers/py/bin/python scripts/gen_real_evidence.py",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "dtype": "float32, eager attention, weights dequantised from the GGUF by gguf-py",
            "first_query": FIRST_QUERY,
            "sink": sink(model, tok, texts, torch),
            "decay": decay(model, corpus_windows(tok), module, torch),
        }
        out = OUT / f"evidence-hf-{name}.json"
        out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out}: sink mean {doc['sink']['mean']:.3f} vs uniform {doc['sink']['uniform']:.3f}")


if __name__ == "__main__":
    main()
