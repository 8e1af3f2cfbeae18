#!/usr/bin/env python3
"""What transformers computes on the model `anatomy train` trained (data/anatomy-moe/):
the references the tour, chapter 9 and the claims tok.bos_sink / s1.exercise3 compare our
engine with.

Run:  /work/peers/py/bin/python scripts/gen_anatomy_moe_checks.py [MODEL_DIR]
Uses: torch 2.15, transformers 5.24, tiktoken, numpy (versions written into each file).

Writes into MODEL_DIR (default data/anatomy-moe):
  transformers_check.json  for each prompt: its Qwen ids and transformers' greedy
                           continuation (KV cache on), the smallest top-1/top-2 logit gap
                           along it (how far rounding is from flipping a token), and the
                           32 largest logits at every position of prompt + continuation
  word_classes.json        held-out English text (the start of a held-out document of the
                           corpus), per token a word class from the word lists below, and
                           transformers' router top-k per MoE layer (output_router_logits)
  attention_sink.json      the mean attention probability on position 0, per layer and
                           head, over query positions 1..T-1 of windows that start each
                           held-out document (eager attention, output_attentions)

The word lists are ours: the commonest nouns and verbs of the Rust book that are not also
used as the other class there (no "use", "call", "return", "test", "list", …). A token gets
a class when its text without the leading space is, in lower case, one of the words;
punctuation is a token of ASCII punctuation only; everything else is "other".
"""

import json
import string
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import Qwen3MoeForCausalLM

assert torch.__version__.startswith("2.15."), torch.__version__
assert transformers.__version__.startswith("5.24."), transformers.__version__

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gen_tokenizer_fixtures as gt  # noqa: E402  (the tokenizer chapter's tiktoken setup)

VERSIONS = {
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "numpy": np.__version__,
}

# Prompts of the corpus's two languages (English technical prose and code; classical Chinese).
PROMPTS = [
    "The first collection type we",
    "fn main() {\n    let",
    "Rust",
    "明月",
]
GREEDY_TOKENS = 24

# Held-out documents (`anatomy train`'s split by path hash, held-out fraction 0.05).
WORD_CLASS_DOC = "en/book-ch08-01-vectors.txt"
WORD_CLASS_TOKENS = 512
SINK_DOCS = [
    "en/book-ch00-00-introduction.txt",
    "en/book-ch07-04-bringing-paths-into-scope-with-the-use-keyword.txt",
    "en/book-ch08-01-vectors.txt",
    "en/book-ch09-02-recoverable-errors-with-result.txt",
    "en/book-ch12-05-working-with-environment-variables.txt",
    "en/book-ch17-03-more-futures.txt",
    "en/book-ch18-03-oo-design-patterns.txt",
    "zh/chinese-028.txt",
]
SINK_TOKENS = 128

NOUNS = set(
    """value values type types function functions variable variables code program programs
    compiler vector vectors element elements string strings method methods data memory file
    files error errors item items reference references example examples chapter number
    numbers struct structs trait traits module modules crate crates library thread threads
    time way collection line lines listing closure closures pointer pointers owner ownership
    heap stack scope field fields enum enums variant variants macro macros syntax integer
    integers parameter parameters argument arguments instance instances user users""".split()
)
VERBS = set(
    """create creates created get gets make makes want wanted see know run runs write writes
    hold holds define defines defined allow allows take takes give gives provide provides
    implement implements compile compiles print prints contain contains means show shows
    add adds iterate say tell become keep keeps put find finds cover discuss explain specify
    infer declare ensure happen happens learn understand mean indicate refer refers add
    added lets""".split()
)


def word_class(text):
    stripped = text.strip()
    if stripped and all(ch in string.punctuation for ch in stripped):
        return "punctuation"
    word = stripped.lower()
    if text.startswith(" ") or text == stripped:
        if word in NOUNS:
            return "noun"
        if word in VERBS:
            return "verb"
    return "other"


def load(directory):
    model = Qwen3MoeForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    return model


def top_logits(model, ids, k=32):
    """The k largest logits at every position of one forward (ids and values, f32)."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    v, i = torch.topk(logits, k, dim=-1)
    return {"ids": i.tolist(), "values": v.tolist(), "max_abs": float(logits.abs().max())}


def greedy(model, ids):
    t = torch.tensor([ids])
    with torch.no_grad():
        gen = model.generate(
            t,
            attention_mask=torch.ones_like(t),
            max_new_tokens=GREEDY_TOKENS,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
            eos_token_id=None,
        )[0, len(ids):].tolist()
        steps = model(torch.tensor([ids + gen])).logits[0][len(ids) - 1 : len(ids) - 1 + len(gen)]
        top2 = torch.topk(steps, 2, dim=-1).values
    return gen, float((top2[:, 0] - top2[:, 1]).min())


def moe_layers(cfg):
    return [
        i
        for i in range(cfg.num_hidden_layers)
        if i not in cfg.mlp_only_layers and (i + 1) % cfg.decoder_sparse_step == 0
    ]


def main():
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "data" / "anatomy-moe"
    enc = gt.tiktoken_encoding(gt.load_ranks(gt.VOCAB))
    model = load(directory)
    cfg = model.config
    corpus = ROOT / "data" / "corpus"

    prompts = []
    for text in PROMPTS:
        ids = enc.encode_ordinary(text)
        gen, gap = greedy(model, ids)
        prompts.append(
            {
                "text": text,
                "ids": ids,
                "greedy": gen,
                "greedy_text": enc.decode(gen),
                "min_top2_gap": gap,
                "top_logits": top_logits(model, ids + gen),
            }
        )
    check = {"prompts": prompts, "versions": VERSIONS}
    (directory / "transformers_check.json").write_text(json.dumps(check, indent=1, ensure_ascii=False) + "\n")

    doc = (corpus / WORD_CLASS_DOC).read_text(encoding="utf-8")
    ids = enc.encode_ordinary(doc)[:WORD_CLASS_TOKENS]
    text = enc.decode(ids)
    assert enc.encode_ordinary(text) == ids, "the excerpt does not re-tokenize to itself"
    classes = [word_class(enc.decode([i])) for i in ids]
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_router_logits=True)
    topk, gap = {}, float("inf")
    for layer, rl in zip(moe_layers(cfg), out.router_logits):
        rl = rl.float()
        topk[str(layer)] = torch.topk(torch.softmax(rl, -1), cfg.num_experts_per_tok, -1).indices.tolist()
        s = torch.sort(rl, -1, descending=True).values
        k = cfg.num_experts_per_tok
        gap = min(gap, float((s[:, k - 1] - s[:, k]).min()))
    word_classes = {
        "about": "The start of a held-out document of the corpus the model was trained on; "
        "per token its word class (scripts/gen_anatomy_moe_checks.py's word lists), and "
        "transformers' router top-k per MoE layer.",
        "document": WORD_CLASS_DOC,
        "word_lists": {"noun": sorted(NOUNS), "verb": sorted(VERBS)},
        "text": text,
        "ids": ids,
        "classes": classes,
        "router_topk": topk,
        "min_router_gap": gap,
        "versions": VERSIONS,
    }
    (directory / "word_classes.json").write_text(json.dumps(word_classes, ensure_ascii=False) + "\n")

    windows = []
    for name in SINK_DOCS:
        ids = enc.encode_ordinary((corpus / name).read_text(encoding="utf-8"))[:SINK_TOKENS]
        assert len(ids) == SINK_TOKENS, name
        windows.append(ids)
    with torch.no_grad():
        out = model(torch.tensor(windows), output_attentions=True)
    # attentions: per layer [B, heads, T, T]; mass on key 0 for queries 1..T-1.
    share = [a[:, :, 1:, 0].mean(dim=(0, 2)).tolist() for a in out.attentions]
    uniform = float(np.mean([1.0 / (q + 1) for q in range(1, SINK_TOKENS)]))
    sink = {
        "about": "Mean attention probability on position 0 over query positions 1..T-1, per "
        "layer and head, over windows that start held-out documents; uniform = what equal "
        "attention over the causal prefix would give.",
        "documents": SINK_DOCS,
        "window": SINK_TOKENS,
        "windows": windows,
        "first_position_share": share,
        "uniform_share": uniform,
        "versions": VERSIONS,
    }
    (directory / "attention_sink.json").write_text(json.dumps(sink) + "\n")
    print(json.dumps({p["text"]: p["greedy_text"] for p in prompts}, ensure_ascii=False, indent=1))
    print("router gap", gap, "sink", [max(s) for s in share], "uniform", uniform)


if __name__ == "__main__":
    main()
