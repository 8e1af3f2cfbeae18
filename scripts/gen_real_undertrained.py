#!/usr/bin/env python3
"""Under-trained tokens of SmolLM2-135M-Instruct, Magikarp-style, for real.undertrained and
real.glitch_norm_screen (src/claims/real.rs).

Run:  PYTHONPATH=target/peers/pyextra target/peers/py/bin/python scripts/gen_real_undertrained.py
      after `bash scripts/get-real-models.sh`.

  indicator  — the L2 norm of each row of the embedding matrix (SmolLM2 ties its embedding
               and unembedding, so both indicators are this one matrix); the lowest 2 % of
               the vocabulary are the candidates;
  test       — chapter 4's repetition prompt (src/tokenizer/glitch.rs: repetition_prompt_ids)
               in SmolLM2's ChatML template, with the candidate's id itself in the user turn;
               p(repeat) is the model's probability of that id as the answer's first token
               (transformers, float32, weights dequantised from the GGUF); verified
               under-trained when p(repeat) < 0.01;
  control    — the same test on CONTROL ids drawn at random (seed SEED) from the other 98 %,
               so the screen's precision can be set against the base rate.
Every candidate is tested (no sampling). Output: data/real/evidence-hf-undertrained-smollm2.json.
"""

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "target" / "real-models"
FILE = "smollm2-135m-instruct-q4_1.gguf"
OUT = ROOT / "data" / "real" / "evidence-hf-undertrained-smollm2.json"
FRACTION = 0.02
THRESHOLD = 0.01
CONTROL = 400
SEED = 27
BATCH = 64
PREFIX = "<|im_start|>user\n请重复以下内容（Please repeat the following text exactly）：\n\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"


def main():
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(str(MODELS_DIR), gguf_file=FILE)
    model = AutoModelForCausalLM.from_pretrained(str(MODELS_DIR), gguf_file=FILE,
                                                 dtype=torch.float32).eval()
    emb = model.get_input_embeddings().weight.detach()
    vocab = emb.shape[0]
    norms = emb.norm(dim=1)
    order = torch.argsort(norms).tolist()
    n_cand = int(round(FRACTION * vocab))
    candidates = order[:n_cand]
    rest = order[n_cand:]
    control = random.Random(SEED).sample(rest, CONTROL)
    prefix = tok(PREFIX, add_special_tokens=False)["input_ids"]
    suffix = tok(SUFFIX, add_special_tokens=False)["input_ids"]

    def p_repeat(ids):
        out = []
        for i in range(0, len(ids), BATCH):
            chunk = ids[i:i + BATCH]
            batch = torch.tensor([prefix + [t] + suffix for t in chunk])
            with torch.no_grad():
                logits = model(batch).logits[:, -1, :].double()
            probs = torch.softmax(logits, dim=-1)
            out += [float(probs[k, t]) for k, t in enumerate(chunk)]
        return out

    def rows(ids, ps):
        return [{"id": t, "piece": tok.convert_ids_to_tokens(t), "norm": float(norms[t]),
                 "p_repeat": p} for t, p in zip(ids, ps)]

    cand = rows(candidates, p_repeat(candidates))
    ctrl = rows(control, p_repeat(control))
    doc = {
        "model": FILE,
        "how": "PYTHONPATH=target/peers/pyextra target/peers/py/bin/python scripts/gen_real_undertrained.py",
        "transformers": transformers.__version__,
        "vocab": vocab,
        "fraction": FRACTION,
        "threshold": THRESHOLD,
        "indicator": "embedding row L2 norm (tied: the unembedding is the same matrix)",
        "prompt": [PREFIX, SUFFIX],
        "candidates": cand,
        "control": ctrl,
        "control_seed": SEED,
    }
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    v = sum(r["p_repeat"] < THRESHOLD for r in cand)
    c = sum(r["p_repeat"] < THRESHOLD for r in ctrl)
    print(f"wrote {OUT}: {v} of {len(cand)} candidates verified; control {c} of {len(ctrl)}")


if __name__ == "__main__":
    main()
