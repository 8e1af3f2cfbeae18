#!/usr/bin/env python3
"""Qwen's vocabulary (a tiktoken file such as data/qwen.tiktoken) as a Hugging Face
tokenizer (tokenizer.json + tokenizer_config.json) in OUT_DIR. The bench checkpoints have
no tokenizer, and llama.cpp's convert_hf_to_gguf.py needs one to write the GGUF's vocabulary
(scripts/bench-peers.sh). Byte-level BPE with Qwen2's split pattern and NFC, as in Qwen's
own tokenizer.json; <|endoftext|> (151643) is the only special token, and the converter pads
the rest of the 151,936 ids.

Run:  /work/pyenv/bin/python scripts/make_qwen_tokenizer.py data/qwen.tiktoken OUT_DIR
Uses: transformers 5.24 (TikTokenConverter), tokenizers.
"""

import sys

from tokenizers import normalizers
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import TikTokenConverter

PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def main():
    src, out = sys.argv[1], sys.argv[2]
    tok = TikTokenConverter(
        vocab_file=src, pattern=PATTERN, additional_special_tokens=["<|endoftext|>"]
    ).converted()
    tok.normalizer = normalizers.NFC()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    fast.save_pretrained(out)
    print(f"{len(fast)} tokens -> {out}")


if __name__ == "__main__":
    main()
