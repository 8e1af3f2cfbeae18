#!/usr/bin/env python3
"""Tokenization fixtures of the two real models' own GGUF tokenizers, from llama.cpp, for
tests/suite/real_models_tokenizer.rs.

Run:  target/peers/llama/bin/python scripts/gen_real_tokenizer_fixtures.py
      (after `bash scripts/get-real-models.sh`). Needs llama-cpp-python 0.3.36 (checked),
      whose vendored llama.cpp reads only the vocabulary (`Llama(path, vocab_only=True)`).
Writes data/real/tokenizer-smollm2.json and data/real/tokenizer-gemma3.json: the model
file's sha256 and, per case, the text, the two flags passed to `Llama.tokenize`
(`add_bos` — llama.cpp's add_special, which adds BOS only when the file's
`tokenizer.ggml.add_bos_token` is true — and `special`, which lets control tokens in the
text be matched), the ids, and `detokenize(ids, special=True)` as a list of bytes (the
round trip; it need not equal the text: BOS and byte-fallback pieces show there).
"""

import hashlib
import json
import sys
from pathlib import Path

import llama_cpp

assert llama_cpp.__version__ == "0.3.36", llama_cpp.__version__

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "smollm2": ROOT / "target/real-models/smollm2-135m-instruct-q4_1.gguf",
    "gemma3": ROOT / "target/real-models/gemma3-270m-q4_k_m.gguf",
}

TEXTS = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "\t\tindented",
    "Hello",
    " Hello",
    "  Hello",
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "It's a dog's life; they'll say we're fine, I'd think.",
    "DON'T SHOUT, I'M HERE",
    "trailing spaces   ",
    "a  b   c    d",
    "line one\nline two\r\nline three",
    "multiple\n\n\nnewlines\n",
    "12345",
    "3.14159 and 2.71828",
    "1,000,000 people in 2024",
    "x = 42 + 7 * (13 - 2)",
    "phone: +1 (555) 010-9999",
    "１２３ full-width digits and ²³ superscripts",
    "你好，世界",
    "我们在学习大型语言模型的位置编码。",
    "混合 mixed 文本 text 123",
    "日本語のテキストです",
    "한국어 텍스트",
    "Привет, мир!",
    "Ελληνικά γράμματα",
    "مرحبا بالعالم",
    "emoji 😀👍🏽🎉",
    "family 👨‍👩‍👧‍👦 and flag 🇫🇷",
    "def f(x):\n    return x ** 2\n",
    "fn main() {\n    println!(\"{}\", 1 + 1);\n}",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "<html><body><div class=\"x\">hi</div></body></html>",
    "SELECT * FROM users WHERE id = 7;",
    "https://example.com/path?q=1&r=two#frag",
    "user@example.com",
    "C:\\Windows\\System32",
    "naïve café résumé",
    "e\u0301 decomposed",
    "Ω≈ç√∫˜µ≤≥÷",
    "~!@#$%^&*()_+`-=[]{}|;:'\",./<>?",
    "----------",
    "==========",
    "....",
    "    four leading spaces",
    "\u00a0non-breaking\u00a0space",
    "zero\u200bwidth",
    "control\x04bytes\x07 and \x1b[0m",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "<|im_start|",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after bos",
    "<eos>",
    "<pad><unk>",
    "a<|im_end|>b",
    "repeated repeated repeated repeated repeated",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
]

# Flags per text: everything with (add_bos, special) = (True, True); texts that may hold a
# special token also with special=False; a few also without BOS.
NO_BOS = {"", "Hello", " Hello", "你好，世界"}


def cases_for(llm):
    out = []
    for text in TEXTS:
        flags = [(True, True)]
        if "<" in text:
            flags.append((True, False))
        if text in NO_BOS:
            flags.append((False, True))
        for add_bos, special in flags:
            ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)
            detok = llm.detokenize(ids, special=True)
            out.append({
                "text": text,
                "add_bos": add_bos,
                "special": special,
                "ids": ids,
                "detokenized": list(detok),
            })
    return out


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def main():
    for name, path in MODELS.items():
        if not path.is_file():
            sys.exit(f"{path}: missing (bash scripts/get-real-models.sh)")
        llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        doc = {
            "generator": "scripts/gen_real_tokenizer_fixtures.py",
            "llama_cpp_python": llama_cpp.__version__,
            "model": path.name,
            "sha256": sha256_of(path),
            "cases": cases_for(llm),
        }
        out = ROOT / "data" / "real" / f"tokenizer-{name}.json"
        out.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out} ({len(doc['cases'])} cases)")


if __name__ == "__main__":
    main()
