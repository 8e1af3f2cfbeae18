#!/usr/bin/env python3
"""Fixture for `anatomy lost-in-middle` (chapter 3's S1 exercise 2 on the engine): the
prompts and greedy answers that Python's own stack gives for a few trials, on the two
checkpoints with Qwen's vocabulary — the bundled data/tiny-qwen3-moe (Qwen3-MoE) and
tests/fixtures/qwen2/qwen_vocab (Qwen2).

Run:  /work/peers/py/bin/python scripts/gen_lost_in_middle_fixtures.py
Uses: torch 2.15, transformers 5.24, tiktoken 0.14, jinja2 3.1.6, and the helpers of
scripts/gen_tokenizer_fixtures.py (the Qwen tiktoken encoding) and
scripts/gen_chat_fixtures.py (the Qwen3 chat template under transformers' jinja setup).

Independently of the Rust code, it rebuilds the harness's documents
(src/long_context/lost_in_middle.rs: the six filler sentences from index k, the key
sentence "The access code for vault k is dddd." at the start / middle / end), renders the
prompt (system message + one user turn with document and question; Qwen3 with
enable_thinking=false, Qwen2 without the switch; or the plain "...\\nAnswer:" form),
tokenises it with tiktoken, and lets transformers answer greedily (16 new tokens, stopping
at the generation config's eos). Writes tests/fixtures/lost_in_middle/expected.json:
per trial the prompt ids, the key sentence's first token index, the answer ids (eos
dropped) and the smallest top-1/top-2 logit gap along the answer; and "fits": the largest
filler word count whose prompts all stay within a token limit (the exercise's 10,000, and
the bundled model's 1024 − 16), with the prompt and document lengths and the mean key
position per placement of that run, as `anatomy lost-in-middle` reports them.
"""

import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gen_chat_fixtures as gc  # noqa: E402
import gen_tokenizer_fixtures as gt  # noqa: E402

transformers.utils.logging.set_verbosity_error()
OUT = ROOT / "tests" / "fixtures" / "lost_in_middle"

FILLER = [
    "The committee reviewed the quarterly figures and found them in line with the forecast.",
    "Rain fell steadily over the valley while the river rose a little each hour.",
    "Several volunteers repainted the fences along the northern edge of the park.",
    "The library extended its opening hours during the examination period.",
    "A new timetable for the regional trains took effect at the start of the month.",
    "Local bakers reported that demand for rye bread had grown over the winter.",
]
SYSTEM = "You are a helpful assistant."
WORDS = 300
VAULTS = [0, 1]
MAX_NEW_TOKENS = 16
MODELS = {
    "bundled": ROOT / "data" / "tiny-qwen3-moe",
    "qwen2_qwen_vocab": ROOT / "tests" / "fixtures" / "qwen2" / "qwen_vocab",
}


def build_trial(words, placement, k):
    code = f"{(k * 7919 + 1234) % 10_000:04d}"
    key = f"The access code for vault {k} is {code}."
    sentences, count, i = [], 0, k
    while count < words:
        s = FILLER[i % len(FILLER)]
        count += len(s.split())
        sentences.append(s)
        i += 1
    at = {"start": 0, "middle": len(sentences) // 2, "end": len(sentences)}[placement]
    sentences.insert(at, key)
    question = f"What is the access code for vault {k}? Answer with the four digits."
    return " ".join(sentences), question, code, key


def prompt_text(document, question, chat, model_type):
    user = f"{document}\n\n{question}"
    if not chat:
        return f"{user}\nAnswer:"
    env = gc.plain_env()
    template = env.from_string(gc.load_template())
    kw = dict(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
              add_generation_prompt=True)
    if model_type != "qwen2":
        kw["enable_thinking"] = False
    return template.render(**kw)


def prompts(enc, words, trials, chat, model_type):
    """(placement, prompt ids, key token, document words) for every trial of a run."""
    out = []
    for placement in ["start", "middle", "end"]:
        for k in range(trials):
            document, question, _, key = build_trial(words, placement, k)
            text = prompt_text(document, question, chat, model_type)
            ids = enc.encode(text, allowed_special="all")
            key_token = len(enc.encode(text[: text.index(key)], allowed_special="all"))
            out.append((placement, ids, key_token, len(document.split())))
    return out


MIN_WORDS = 50


def fit(enc, trials, chat, model_type, limit):
    """The largest word count (bisection between MIN_WORDS and 2·limit) whose prompts all
    have at most `limit` tokens."""
    def fits(w):
        return all(len(ids) <= limit for _, ids, _, _ in prompts(enc, w, trials, chat, model_type))

    lo, hi = MIN_WORDS, 2 * limit
    assert fits(lo) and not fits(hi)
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    run = prompts(enc, lo, trials, chat, model_type)
    keys = {p: [kt for q, _, kt, _ in run if q == p] for p in ["start", "middle", "end"]}
    return {
        "model_type": model_type, "chat": chat, "limit": limit, "trials_per_placement": trials,
        "words": lo,
        "min_prompt_tokens": min(len(ids) for _, ids, _, _ in run),
        "max_prompt_tokens": max(len(ids) for _, ids, _, _ in run),
        "min_document_words": min(w for *_, w in run),
        "max_document_words": max(w for *_, w in run),
        "mean_key_token": {p: sum(v) / len(v) for p, v in keys.items()},
    }


def answer(model, ids, eos):
    """transformers' greedy answer (eos dropped) and its smallest top-1/top-2 margin."""
    with torch.no_grad():
        x = torch.tensor([ids])
        gen = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_NEW_TOKENS,
                             do_sample=False, eos_token_id=eos, pad_token_id=0)[0, len(ids):].tolist()
        full = model(torch.tensor([ids + gen])).logits[0]
    steps = full[len(ids) - 1: len(ids) - 1 + len(gen)]
    top2 = torch.topk(steps, 2, dim=-1).values
    gap = float((top2[:, 0] - top2[:, 1]).min())
    if gen and gen[-1] in eos:
        gen = gen[:-1]
    return gen, gap


def main():
    enc = gt.tiktoken_encoding(gt.load_ranks(gt.VOCAB))
    out = {"words": WORDS, "max_new_tokens": MAX_NEW_TOKENS, "system": SYSTEM, "cases": [],
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    for name, directory in MODELS.items():
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        model_type = model.config.model_type
        eos = model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        for chat in [True, False]:
            for placement in ["start", "middle", "end"]:
                for k in VAULTS:
                    document, question, code, key = build_trial(WORDS, placement, k)
                    text = prompt_text(document, question, chat, model_type)
                    ids = enc.encode(text, allowed_special="all")
                    key_token = len(enc.encode(text[: text.index(key)], allowed_special="all"))
                    gen, gap = answer(model, ids, eos)
                    assert gap > 1e-3, f"{name} {placement} {k}: greedy margin {gap}"
                    out["cases"].append({
                        "model": name, "model_type": model_type, "chat": chat,
                        "placement": placement, "vault": k, "expected": code,
                        "prompt_ids": ids, "key_token": key_token,
                        "answer_ids": gen, "answer": enc.decode(gen), "min_greedy_gap": gap,
                    })
                    print(f"{name} chat={chat} {placement} {k}: {len(ids)} tokens, key at "
                          f"{key_token}, answer {enc.decode(gen)!r}, gap {gap:.1e}")
    out["fits"] = [fit(enc, 5, True, "qwen3_moe", 1024 - MAX_NEW_TOKENS)]
    for chat, model_type in [(True, "qwen2"), (True, "qwen3"), (False, "qwen2")]:
        out["fits"].append(fit(enc, 5, chat, model_type, 10_000))
    for f in out["fits"]:
        print(f)
    # The bundled model's default run (`anatomy lost-in-middle data/tiny-qwen3-moe`): every
    # answer, as transformers gives it.
    model = AutoModelForCausalLM.from_pretrained(MODELS["bundled"], dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    eos = [model.generation_config.eos_token_id]
    default = out["fits"][0]
    out["bundled_default_answers"] = []
    for placement, ids, _, _ in prompts(enc, default["words"], 5, True, "qwen3_moe"):
        gen, gap = answer(model, ids, eos)
        assert gap > 1e-3, f"default run {placement}: greedy margin {gap}"
        out["bundled_default_answers"].append({"placement": placement, "answer_ids": gen,
                                               "answer": enc.decode(gen), "min_greedy_gap": gap})
    print("default run:", [a["answer"] for a in out["bundled_default_answers"]][:3])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "expected.json").write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
