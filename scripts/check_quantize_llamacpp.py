#!/usr/bin/env python3
"""Does llama.cpp load and run what `anatomy quantize` writes, and how far are its logits
from transformers' on the original checkpoint? (Chapter 11; the printed table is in
tests/fixtures/quantize/PROVENANCE.md.)

Run from the repository root, after `cargo build` (or pass --anatomy PATH):
    /work/peers/llama/bin/python scripts/check_quantize_llamacpp.py

Versions: transformers 5.24.0 + torch 2.15.0 (/work/peers/py, run as a subprocess for the
reference logits), llama-cpp-python 0.3.36 (this interpreter).

For each checkpoint (tests/fixtures/quantize/hf and data/tiny-qwen3-moe, the latter with
--vocab data/qwen.tiktoken so the tokenizer path is exercised too) and every file type,
`anatomy quantize` writes a GGUF; llama.cpp loads it and evaluates a fixed prompt of token
ids; transformers evaluates the same ids on the bf16 checkpoint in f32. Printed per file:
the largest |logit difference| over all positions and the mean over positions of
KL(transformers || llama.cpp).
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY_TORCH = "/work/peers/py/bin/python"
FTYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
          "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k"]
CHECKPOINTS = [
    ("hf", ROOT / "tests/fixtures/quantize/hf", None),
    ("tiny", ROOT / "data/tiny-qwen3-moe", ROOT / "data/qwen.tiktoken"),
]

TRANSFORMERS_LOGITS = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
model.eval()
ids = json.loads(sys.argv[2])
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0]
json.dump(logits.tolist(), open(sys.argv[3], "w"))
"""


def prompt_ids(vocab_size):
    return [(7 + 37 * i) % min(vocab_size, 5000) for i in range(16)]


def main():
    import numpy as np
    import llama_cpp

    ap = argparse.ArgumentParser()
    ap.add_argument("--anatomy", default=str(ROOT / "target/debug/anatomy"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="check_quantize_"))
    rows = []
    for label, model_dir, vocab in CHECKPOINTS:
        cfg = json.loads((model_dir / "config.json").read_text())
        ids = prompt_ids(cfg["vocab_size"])
        ref_path = work / f"{label}-transformers.json"
        subprocess.run([PY_TORCH, "-c", TRANSFORMERS_LOGITS, str(model_dir), json.dumps(ids),
                        str(ref_path)], check=True)
        ref = np.array(json.loads(ref_path.read_text()), dtype=np.float64)
        for ftype in FTYPES:
            out = work / f"{label}-{ftype}.gguf"
            cmd = [args.anatomy, "quantize", str(model_dir), "--type", ftype, "--out", str(out)]
            if vocab is not None:
                cmd += ["--vocab", str(vocab)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            llm = llama_cpp.Llama(model_path=str(out), n_ctx=64, logits_all=True,
                                  n_threads=2, verbose=False)
            llm.eval(ids)
            got = np.array(llm.scores[: len(ids)], dtype=np.float64)
            del llm
            diff = float(np.max(np.abs(got - ref)))
            p = np.exp(ref - ref.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            logq = got - got.max(axis=1, keepdims=True)
            logq -= np.log(np.exp(logq).sum(axis=1, keepdims=True))
            kl = float(np.mean(np.sum(p * (np.log(p + 1e-300) - logq), axis=1)))
            rows.append((label, ftype, out.stat().st_size, diff, kl))
            out.unlink()
    print(f"| checkpoint | type | GGUF bytes | max abs logit diff vs transformers | mean KL |")
    print("|---|---|---:|---:|---:|")
    for label, ftype, size, diff, kl in rows:
        print(f"| {label} | {ftype} | {size} | {diff:.3e} | {kl:.3e} |")


if __name__ == "__main__":
    sys.exit(main())
