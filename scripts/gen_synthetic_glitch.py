#!/usr/bin/env python3
"""A tiny SYNTHETIC checkpoint with under-trained embedding rows, planted honestly.

Run:  /work/pyenv/bin/python scripts/gen_synthetic_glitch.py
Libraries: tokenizers 0.23 (BPE training), numpy 2 (the model and its hand-written
gradients), safetensors (the file). Deterministic (fixed seeds).

The mechanism is the one the source text (5.3.2) gives for glitch tokens:
1. the tokenizer is trained on corpus A: template sentences in English and Chinese plus
   web spam ("法战组合", "魔龙令牌", "搜狐首页", ...) and comment rulers;
2. the model is trained on corpus B: template sentences only (the "cleaned" data);
3. a token that never occurs in B never receives a gradient on its embedding row, so the
   row keeps its random initialisation (small norm), while every row that does occur
   moves away from it.
The model is a bigram language model: logits(next | x) = lm_head · embed[x], trained
with full-batch Adam on corpus B's bigram counts; the gradients are written out by hand.
The embedding matrix has padding rows past the tokenizer (as Qwen's 152,064 rows do past
its 151,669 ids), which no text can produce; they serve as the known-unused reference of
the unembedding indicator.

Writes data/synthetic-glitch/: tokenizer.json, model.safetensors (model.embed_tokens.weight,
lm_head.weight, F32), config.json, planted.json (the ids with zero count in corpus B:
the ground truth the screens must find) and README.md.
"""
import json
import os
import random

import numpy as np
import tokenizers
from safetensors.numpy import save_file
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "data", "synthetic-glitch")
PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
VOCAB_SIZE = 1000
HIDDEN = 32
PADDED_ROWS = 1088  # a multiple of 64 past the tokenizer's ids
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

EN = {
    "det": ["the", "a", "every", "one", "this", "that"],
    "adj": ["small", "quiet", "bright", "old", "young", "clever", "green", "busy", "happy", "tired"],
    "noun": ["cat", "teacher", "student", "river", "city", "garden", "doctor", "machine", "book", "child",
             "farmer", "model", "window", "market", "song"],
    "verb": ["sees", "likes", "reads", "builds", "finds", "helps", "watches", "follows", "paints", "visits"],
    "end": [".", "!", "?", "."],
}
ZH = {
    "subj": ["我", "你", "他", "她", "我们", "老师", "学生", "医生", "孩子", "朋友", "工人", "农民"],
    "adv": ["今天", "常常", "已经", "也", "都", "慢慢地", "认真地", "在家里"],
    "verb": ["喜欢", "学习", "看", "写", "吃", "买", "读", "画", "听", "打扫"],
    "obj": ["苹果", "小说", "电影", "数学", "中文", "音乐", "房间", "报纸", "米饭", "花园", "故事", "历史"],
    "end": ["。", "！", "？", "。"],
}
SPAM = ["法战组合", "魔龙令牌", "鸟成长记", "凡本网注明", "早餐加盟", "搜狐首页", "传奇私服", "免费领取"]


def sentence(rng):
    if rng.random() < 0.5:
        e = EN
        s = f"{rng.choice(e['det'])} {rng.choice(e['adj'])} {rng.choice(e['noun'])} {rng.choice(e['verb'])} " \
            f"{rng.choice(e['det'])} {rng.choice(e['noun'])}{rng.choice(e['end'])}"
        return s[0].upper() + s[1:]
    z = ZH
    return f"{rng.choice(z['subj'])}{rng.choice(z['adv'])}{rng.choice(z['verb'])}{rng.choice(z['obj'])}{rng.choice(z['end'])}"


def document(rng, n):
    return " ".join(sentence(rng) for _ in range(n))


def corpus_a(rng):
    docs = [document(rng, rng.randint(3, 8)) for _ in range(3000)]
    for _ in range(600):
        spam = " ".join(rng.sample(SPAM, 3))
        docs.append(f"{spam}！{rng.choice(SPAM)}")
        docs.append("=" * rng.choice([16, 32, 48]) + "\n" + "-" * rng.choice([16, 32]))
    rng.shuffle(docs)
    return docs


def train_tokenizer(docs):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer)
    tok.add_special_tokens(SPECIALS)
    return tok


def train_model(stream, n_rows, seed):
    """Full-batch Adam on the bigram counts of `stream`; returns (embed, lm_head, init, losses)."""
    rng = np.random.default_rng(seed)
    E = (0.02 * rng.standard_normal((n_rows, HIDDEN))).astype(np.float64)
    U = (0.02 * rng.standard_normal((n_rows, HIDDEN))).astype(np.float64)
    E0 = E.copy()
    counts = np.zeros((n_rows, n_rows))
    np.add.at(counts, (stream[:-1], stream[1:]), 1.0)
    total = counts.sum()
    row_count = counts.sum(axis=1, keepdims=True)
    params = [E, U]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    lr, b1, b2, eps = 0.02, 0.9, 0.999, 1e-8
    losses = []
    for step in range(1, 401):
        logits = E @ U.T                                   # [rows, rows]: input x → next
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        loss = -(counts * np.log(p + 1e-30)).sum() / total
        losses.append(float(loss))
        dlogits = (row_count * p - counts) / total         # d loss / d logits
        dE = dlogits @ U                                   # zero for rows never an input
        dU = dlogits.T @ E
        for i, (par, g) in enumerate(zip(params, [dE, dU])):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            mh, vh = m[i] / (1 - b1 ** step), v[i] / (1 - b2 ** step)
            par -= lr * mh / (np.sqrt(vh) + eps)
    return E, U, E0, losses


def main():
    rng = random.Random(7)
    docs_a = corpus_a(rng)
    tok = train_tokenizer(docs_a)
    n_ids = tok.get_vocab_size()
    eot = tok.token_to_id("<|endoftext|>")

    rng_b = random.Random(11)
    docs_b = [document(rng_b, rng_b.randint(3, 8)) for _ in range(2000)]
    stream = [eot]
    for d in docs_b:
        stream += tok.encode(d, add_special_tokens=False).ids + [eot]
    stream = np.array(stream)
    seen = np.bincount(stream, minlength=PADDED_ROWS) > 0
    planted = [int(i) for i in np.flatnonzero(~seen)]

    E, U, E0, losses = train_model(stream, PADDED_ROWS, seed=3)
    # The mechanism, checked: rows never seen kept their initial values exactly.
    assert np.array_equal(E[~seen], E0[~seen])
    assert not np.any(np.all(E[seen] == E0[seen], axis=1))
    norms = np.linalg.norm(E, axis=1)
    assert norms[~seen].max() < norms[seen].min(), (norms[~seen].max(), norms[seen].min())

    def decode(i):
        return tok.decode([i], skip_special_tokens=False) if i < n_ids else None

    cjk = [i for i in planted if i < n_ids and sum("\u4e00" <= c <= "\u9fa5" for c in decode(i)) > 1]
    os.makedirs(OUT, exist_ok=True)
    tok.save(os.path.join(OUT, "tokenizer.json"))
    save_file({"model.embed_tokens.weight": E.astype(np.float32), "lm_head.weight": U.astype(np.float32)},
              os.path.join(OUT, "model.safetensors"), metadata={"format": "pt", "synthetic": "true"})
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump({"model_type": "synthetic-bigram", "synthetic": True, "vocab_size": PADDED_ROWS,
                   "hidden_size": HIDDEN, "tie_word_embeddings": False,
                   "note": "SYNTHETIC demonstration checkpoint, not a language model release; "
                           "see README.md and scripts/gen_synthetic_glitch.py"}, f, indent=1)
    with open(os.path.join(OUT, "planted.json"), "w", encoding="utf-8") as f:
        json.dump({
            "generator": "scripts/gen_synthetic_glitch.py",
            "versions": {"tokenizers": tokenizers.__version__, "numpy": np.__version__},
            "n_ids": n_ids, "rows": PADDED_ROWS, "hidden": HIDDEN,
            "never_seen": planted,
            "never_seen_tokens": len([i for i in planted if i < n_ids]),
            "padding_rows": PADDED_ROWS - n_ids,
            "multichar_cjk": {str(i): decode(i) for i in cjk},
            "loss_first_last": [losses[0], losses[-1]],
            "max_norm_never_seen": float(norms[~seen].max()),
            "min_norm_seen": float(norms[seen].min()),
        }, f, ensure_ascii=False, indent=1)
    with open(os.path.join(OUT, "README.md"), "w", encoding="utf-8") as f:
        f.write(
            "# SYNTHETIC checkpoint — a demonstration, not a language model\n\n"
            "Made by `scripts/gen_synthetic_glitch.py` to show how glitch tokens arise (source 5.3.2):\n"
            "the tokenizer was trained on text with web spam, the model (a bigram model, hidden size\n"
            f"{HIDDEN}) on text without it. The {len(planted)} rows listed in `planted.json` never\n"
            "occurred in the model's training data, so their embeddings kept their random initial\n"
            "values. `anatomy glitch --vocab data/synthetic-glitch/tokenizer.json --model\n"
            f"data/synthetic-glitch --top-k {len(planted)}` finds exactly them.\n")
    print(f"vocab {n_ids} ids + {PADDED_ROWS - n_ids} padding rows; never seen in corpus B: "
          f"{len(planted)} rows ({len(planted) - (PADDED_ROWS - n_ids)} tokens), of which multi-char CJK {len(cjk)}: "
          f"{[decode(i) for i in cjk]}; loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
          f"norms: never-seen max {norms[~seen].max():.4f} < seen min {norms[seen].min():.4f}")
    # The unembedding indicator, numpy version, for the record.
    mean = U.mean(axis=0)
    _, _, vt = np.linalg.svd(U - mean, full_matrices=False)
    c = vt[0]
    Up = U - np.outer(U @ c, c)
    ref = Up[n_ids:].mean(axis=0)
    dist = 1 - (Up @ ref) / np.maximum(np.linalg.norm(Up, axis=1) * np.linalg.norm(ref), 1e-6)
    top = set(np.argsort(dist)[:len(planted)].tolist())
    print(f"unembedding indicator: {len(top & set(planted))} of its {len(planted)} smallest are never-seen rows")


if __name__ == "__main__":
    main()
