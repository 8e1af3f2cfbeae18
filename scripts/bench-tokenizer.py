#!/usr/bin/env python3
"""Encoding speed: our tokenizer (examples/tokenizer_bench.rs) against tiktoken 0.14 on
the same few MB of mixed text, in the same run.

Usage: /work/pyenv/bin/python scripts/bench-tokenizer.py [--mb 4] [--threads 2] [--repeats 3]

The corpus is assembled from text already on the machine, in a fixed order: translated
message catalogues (/usr/share/locale/*/LC_MESSAGES/*.mo, read with Python's gettext:
Chinese, Japanese, Korean, Russian, Arabic, German, French, Spanish), source code (Rust
crates in ~/.cargo/registry/src, Python's standard library), English prose (the English
side of the catalogues, /usr/share/common-licenses), plus this repository's tokenizer
fixtures. Its size and sha256 are printed: other machines will have a different corpus.
"""
import argparse
import base64
import gettext
import glob
import hashlib
import json
import os
import subprocess
import sys
import time

import tiktoken

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from gen_tokenizer_fixtures import ADDED, PATTERN, load_ranks  # noqa: E402

LANGS = ["zh_CN", "ja", "ko", "ru", "ar", "de", "fr", "es"]


def catalog_text(lang, limit):
    """Translated strings (and, for English, the originals) from the .mo files of a language."""
    out, size = [], 0
    for path in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
        try:
            with open(path, "rb") as f:
                cat = gettext.GNUTranslations(f)._catalog
        except Exception:
            continue
        for k in sorted(cat, key=str):
            v = cat[k]
            if isinstance(v, str) and v.strip():
                out.append(v)
                size += len(v.encode())
            if size >= limit:
                return "\n".join(out)
    return "\n".join(out)


def english_text(limit):
    out, size = [], 0
    for path in sorted(glob.glob("/usr/share/locale/de/LC_MESSAGES/*.mo")):
        try:
            with open(path, "rb") as f:
                cat = gettext.GNUTranslations(f)._catalog
        except Exception:
            continue
        for k in sorted(cat, key=str):
            if isinstance(k, str) and k.strip():
                out.append(k)
                size += len(k.encode())
        if size >= limit:
            break
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if size >= limit or not os.path.isfile(path):
            continue
        t = open(path, encoding="utf-8", errors="ignore").read()
        out.append(t)
        size += len(t.encode())
    return "\n".join(out)


def code_text(limit):
    out, size = [], 0
    files = sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/regex-syntax-*/src/**/*.rs"), recursive=True))
    files += sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))
    for path in files:
        if size >= limit:
            break
        t = open(path, encoding="utf-8", errors="ignore").read()
        out.append(t)
        size += len(t.encode())
    return "\n".join(out)


def build_corpus(mb):
    budget = int(mb * 1e6)
    parts = []
    per_lang = budget // 2 // len(LANGS)
    for lang in LANGS:
        parts.append(catalog_text(lang, per_lang))
    parts.append(code_text(budget // 4))
    parts.append(english_text(budget // 4))
    fx = json.load(open(os.path.join(ROOT, "tests/fixtures/tokenizer/encode.json"), encoding="utf-8"))
    parts.append("\n".join(c["text"] for c in fx["cases"]))
    return "\n\n".join(parts)


def ids_hash(ids):
    h = 1469598103934665603
    for i in ids:
        h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def best(fn, repeats):
    t_best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        t_best = min(t_best, time.perf_counter() - t)
    return t_best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    text = build_corpus(args.mb)
    data = text.encode("utf-8")
    out_dir = os.path.join(ROOT, "target", "bench-tokenizer")
    os.makedirs(out_dir, exist_ok=True)
    corpus = os.path.join(out_dir, "corpus.txt")
    with open(corpus, "wb") as f:
        f.write(data)
    print(f"corpus {corpus}: {len(data)/1e6:.2f} MB, sha256 {hashlib.sha256(data).hexdigest()[:16]}", file=sys.stderr)

    ranks = load_ranks(os.path.join(ROOT, "data", "qwen.tiktoken"))
    enc = tiktoken.Encoding(name="qwen", pat_str=PATTERN, mergeable_ranks=ranks,
                            special_tokens={c: i for c, i, _ in ADDED})
    t1, ids = best(lambda: enc.encode(text, allowed_special="all"), args.repeats)
    # Equal threads: tiktoken's own batch API over the text cut at line ends into ~64 kB
    # documents (the ids differ from the one-string encoding only at those cuts).
    docs, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        size += len(line)
        if size >= 64 * 1024:
            docs.append("".join(cur))
            cur, size = [], 0
    if cur:
        docs.append("".join(cur))
    tn, _ = best(lambda: enc.encode_batch(docs, num_threads=args.threads, allowed_special="all"), args.repeats)

    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    ours = subprocess.run(
        ["cargo", "run", "--quiet", "--release", "--example", "tokenizer_bench", "--", corpus, str(args.repeats)],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    r = json.loads(ours.stdout)
    same = r["ids"] == len(ids) and int(r["hash"]) == ids_hash(ids)
    mb = len(data) / 1e6
    result = {
        "corpus_mb": round(mb, 3),
        "ids": len(ids),
        "ids_equal_tiktoken": same,
        "threads": args.threads,
        "ours_single_mb_s": round(r["single_thread_mb_s"], 2),
        "tiktoken_single_mb_s": round(mb / t1, 2),
        "ours_parallel_mb_s": round(r["parallel_mb_s"], 2),
        "tiktoken_batch_mb_s": round(mb / tn, 2),
        "versions": {"tiktoken": tiktoken.__version__},
    }
    result["ratio_single"] = round(result["ours_single_mb_s"] / result["tiktoken_single_mb_s"], 2)
    result["ratio_parallel"] = round(result["ours_parallel_mb_s"] / result["tiktoken_batch_mb_s"], 2)
    print(json.dumps(result, indent=1))
    if not same:
        sys.exit("our ids differ from tiktoken's on the corpus")


if __name__ == "__main__":
    main()
