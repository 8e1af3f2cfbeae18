#!/usr/bin/env python3
"""Reference logits of the two real models (SmolLM2-135M-Instruct Q4_1, Gemma 3 270M Q4_K_M)
from transformers and llama.cpp, for tests/suite/real_models_logits.rs.

Run:  PYTHONPATH=target/peers/pyextra target/peers/py/bin/python scripts/gen_real_model_logits.py
      (pyextra holds accelerate 1.15.0 + psutil, which transformers wants for GGUF files:
      `target/peers/py/bin/python -m pip install --no-deps --target target/peers/pyextra
      accelerate==1.15.0 psutil`), after `bash scripts/get-real-models.sh`.
Uses: torch, transformers (from_pretrained(gguf_file=...) dequantises every tensor through
gguf-py), safetensors, numpy in this interpreter; llama-cpp-python 0.3.36 in a child process
run by target/peers/llama/bin/python (its vendored llama.cpp).

For each model and each prompt in PROMPTS:
  1. llama.cpp tokenises the text (its own tokenizer, BOS as the file asks) — the ids both
     references and our tests then run on;
  2. llama.cpp's logits at every position (logits_all, 2 threads) and its greedy
     continuation of GREEDY tokens;
  3. transformers' logits on the same ids in float64 with eager attention, on the weights
     dequantised from the same file, and its greedy continuation.
Stored per prompt (data/real/<model>/logits.safetensors): the ids, transformers' per-position
logsumexp and its top-K token ids and log-probabilities, the whole transformers logit row
of the last position for the first FULL_ROW_PROMPTS prompts; per position the KL(transformers ‖ llama.cpp) both exact and
coarsened onto the partition {top-K of transformers, the rest} — the same coarsening the
test applies to ours, so the two are compared on equal terms (coarsening can only lower a
KL). The greedy continuations and versions go into manifest.json.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "target" / "real-models"
OUT = ROOT / "data" / "real"
LLAMA_PY = ROOT / "target" / "peers" / "llama" / "bin" / "python"
TOP_K = 32
GREEDY = 16
THREADS = 2
# Prompts whose last position's whole transformers row is stored (Gemma's vocabulary makes a
# row 1 MB; the top-K of every position covers the rest).
FULL_ROW_PROMPTS = 3

MODELS = {
    "smollm2": "smollm2-135m-instruct-q4_1.gguf",
    "gemma3": "gemma3-270m-q4_k_m.gguf",
}


def corpus(path, chars):
    text = (ROOT / "data" / "corpus" / path).read_text(encoding="utf-8")
    return " ".join(text.split())[:chars]


PROMPTS = [
    ("english", "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is"),
    ("chinese", "北京是中国的首都，也是一座有着三千多年历史的古城。长城、故宫和天坛"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n    return"),
    ("numbers", "1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89,    144   \t 233; 3.14159 2.71828 1e-9 0x1F"),
    ("chat", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
             "<|im_start|>user\nWhat is the tallest mountain on Earth?<|im_end|>\n<|im_start|>assistant\n"),
    ("long_en", corpus("en/book-appendix-01-keywords.txt", 1400)),
    ("long_zh", corpus("zh/chinese-000.txt", 150)),
]

LLAMA_CHILD = r"""
import json, sys, math
import numpy as np
import llama_cpp
import llama_cpp.llama_cpp as C
# Weight repacking (llama.cpp's extra CPU buffer types, AMX among them) crashes in this
# sandbox; the plain CPU kernels compute the same logits up to summation order.
_default = C.llama_model_default_params
def no_repack():
    p = _default()
    p.use_extra_bufts = False
    return p
C.llama_model_default_params = no_repack
path, prompts, greedy, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = llama_cpp.Llama(model_path=path, n_ctx=1024, logits_all=True, n_threads=threads,
                      n_batch=512, verbose=False)
out = []
for text in prompts:
    ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
    llm.reset()
    llm.eval(ids)
    logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
    np.save(sys.argv[5] + f"/{len(out)}.npy", logits)
    cont = []
    for _ in range(greedy):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        cont.append(nxt)
        llm.eval([nxt])
    out.append({"ids": ids, "greedy": cont})
print(json.dumps({"version": llama_cpp.__version__, "prompts": out}))
"""


def llama_reference(path, texts, tmp):
    run = subprocess.run(
        [str(LLAMA_PY), "-c", LLAMA_CHILD, str(path), json.dumps(texts), str(GREEDY), str(THREADS), tmp],
        check=True, capture_output=True, text=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def kl_rows(p_logits, q_logits):
    """KL(p ‖ q) per row for logits rows (float64)."""
    import torch
    lp = torch.log_softmax(p_logits, -1)
    lq = torch.log_softmax(q_logits, -1)
    return (lp.exp() * (lp - lq)).sum(-1)


def coarse_kl(p_logits, q_logits, top):
    """KL(p ‖ q) on the partition {each of p's top ids, the rest} per row."""
    import torch
    lp = torch.log_softmax(p_logits, -1)
    lq = torch.log_softmax(q_logits, -1)
    lp_top, lq_top = lp.gather(-1, top), lq.gather(-1, top)
    kl = (lp_top.exp() * (lp_top - lq_top)).sum(-1)
    rp = (1 - lp_top.exp().sum(-1)).clamp_min(0)
    rq = (1 - lq_top.exp().sum(-1)).clamp_min(1e-300)
    tail = torch.where(rp > 0, rp * (rp.clamp_min(1e-300).log() - rq.log()), torch.zeros_like(rp))
    return kl + tail


def main():
    import tempfile
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import save_file
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(THREADS)
    for name, file in MODELS.items():
        path = MODELS_DIR / file
        if not path.exists():
            sys.exit(f"{path}: missing (bash scripts/get-real-models.sh)")
        texts = [t for _, t in PROMPTS]
        with tempfile.TemporaryDirectory() as tmp:
            ref = llama_reference(path, texts, tmp)
            llama_rows = [np.load(f"{tmp}/{i}.npy") for i in range(len(texts))]
        model = AutoModelForCausalLM.from_pretrained(
            str(MODELS_DIR), gguf_file=file, dtype=torch.float32, attn_implementation="eager")
        model = model.double().eval()
        tensors, prompts = {}, []
        for i, ((label, _), r) in enumerate(zip(PROMPTS, ref["prompts"])):
            ids = r["ids"]
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].double()
                gen = model.generate(torch.tensor([ids]), max_new_tokens=GREEDY, do_sample=False,
                                     attention_mask=torch.ones(1, len(ids), dtype=torch.long))
            ours_greedy = gen[0, len(ids):].tolist()
            lse = torch.logsumexp(logits, -1)
            top = logits.topk(TOP_K, -1).indices
            llama = torch.from_numpy(llama_rows[i]).double()
            n = len(ids)
            rows = [n - 1] if i < FULL_ROW_PROMPTS else []
            p = f"p{i}."
            tensors[p + "ids"] = np.array(ids, dtype=np.int64)
            tensors[p + "lse"] = lse.numpy()
            tensors[p + "top_ids"] = top.numpy().astype(np.int64)
            tensors[p + "top_logprobs"] = (logits.gather(-1, top) - lse[:, None]).numpy()
            tensors[p + "full_rows"] = np.array(rows, dtype=np.int64)
            if rows:
                tensors[p + "full"] = logits[rows].float().numpy()
            tensors[p + "llama_kl"] = kl_rows(logits, llama).numpy()
            tensors[p + "llama_kl_coarse"] = coarse_kl(logits, llama, top).numpy()
            prompts.append({
                "label": label, "tokens": n,
                "greedy_transformers": ours_greedy, "greedy_llama_cpp": r["greedy"],
                "llama_cpp_mean_kl": float(tensors[p + "llama_kl"].mean()),
                "llama_cpp_mean_kl_coarse": float(tensors[p + "llama_kl_coarse"].mean()),
                "logit_scale": float(logits.abs().max()),
            })
            print(name, label, n, "tokens, llama.cpp KL", prompts[-1]["llama_cpp_mean_kl"], flush=True)
        out = OUT / name
        out.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(out / "logits.safetensors"))
        manifest = {
            "model_file": file,
            "generator": "scripts/gen_real_model_logits.py",
            "transformers": transformers.__version__, "torch": torch.__version__,
            "llama_cpp_python": ref["version"], "top_k": TOP_K, "greedy_tokens": GREEDY,
            "transformers_dtype": "float64 (weights dequantised from the GGUF by gguf-py)",
            "prompts": prompts,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
        del model


if __name__ == "__main__":
    main()
