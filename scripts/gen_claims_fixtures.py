#!/usr/bin/env python3
"""Reference counts for tests/claims_optim_chat.rs and tests/claims_tokenizer.rs, from
tiktoken (the reference implementation for data/qwen.tiktoken).

Run:  python3 scripts/gen_claims_fixtures.py      (needs only tiktoken; made with 0.14.0)
Writes tests/fixtures/claims/tiktoken.json:
  early_stop_ids         Qwen3's early-stop text (chat.budget) as token ids
  literal_scan_whitespace  of the literal scan's tokens (decoded length > 20 characters,
                         no "<|"), those that are whitespace only (tok.literal_scan)
"""
import json
import os

import tiktoken
from tiktoken.load import load_tiktoken_bpe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "data", "qwen.tiktoken")
OUT = os.path.join(ROOT, "tests", "fixtures", "claims", "tiktoken.json")

# Qwen's pre-tokenizer (the same as scripts/gen_tokenizer_fixtures.py).
PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

# src/chat/thinking.rs EARLY_STOP_TEXT (the Qwen3 technical report's text).
EARLY_STOP = ("Considering the limited time by the user, I have to give the solution based on "
              "the thinking directly now.\n</think>\n\n")


def main():
    ranks = load_tiktoken_bpe(VOCAB)
    enc = tiktoken.Encoding("qwen", pat_str=PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<think>": 151667, "</think>": 151668})
    early = enc.encode(EARLY_STOP, allowed_special="all")
    whitespace = 0
    for i in range(len(ranks)):
        s = enc.decode([i], errors="replace")
        if len(s) > 20 and "<|" not in s and s.strip() == "":
            whitespace += 1
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "scripts/gen_claims_fixtures.py",
                   "versions": {"tiktoken": tiktoken.__version__},
                   "early_stop_text": EARLY_STOP, "early_stop_ids": early,
                   "literal_scan_whitespace": whitespace}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
