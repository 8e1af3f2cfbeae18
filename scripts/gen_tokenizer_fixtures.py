#!/usr/bin/env python3
"""Expected token ids for the tokenizer tests (tests/tokenizer.rs).

Run:  /work/pyenv/bin/python scripts/gen_tokenizer_fixtures.py
Libraries: tiktoken 0.14 (the reference for data/qwen.tiktoken), tokenizers 0.23 and
transformers 5.24 (Hugging Face's side: `TikTokenConverter` turns the tiktoken file into a
tokenizer.json with Qwen's NFC normalizer, split pattern and added tokens).

Writes into tests/fixtures/tokenizer/:
  encode.json          every case: text, tiktoken ids, Hugging Face ids (full vocabulary)
  decode.json          id sequences (some cut inside a character) and their decoded text
  small-tokenizer.json a Qwen-style tokenizer.json over the first 4096 ranks (the HF
                       loader's test input), and small-encode.json: its ids per case
  vocab.json           counts over the vocabulary (literal scan) for cross-checks
"""
import base64
import hashlib
import json
import os
import random
import sys
import tempfile

import tiktoken
import tokenizers
import transformers
from transformers.convert_slow_tokenizer import TikTokenConverter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "data", "qwen.tiktoken")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

# Qwen's pre-tokenizer (dashscope qwen_tokenizer.py PAT_STR == Qwen2/3 tokenizer.json Split).
PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

# Qwen3's added tokens (tokenizer_config.json added_tokens_decoder): (content, id, special).
ADDED = [
    ("<|endoftext|>", 151643, True), ("<|im_start|>", 151644, True), ("<|im_end|>", 151645, True),
    ("<|object_ref_start|>", 151646, True), ("<|object_ref_end|>", 151647, True),
    ("<|box_start|>", 151648, True), ("<|box_end|>", 151649, True),
    ("<|quad_start|>", 151650, True), ("<|quad_end|>", 151651, True),
    ("<|vision_start|>", 151652, True), ("<|vision_end|>", 151653, True),
    ("<|vision_pad|>", 151654, True), ("<|image_pad|>", 151655, True), ("<|video_pad|>", 151656, True),
    ("<tool_call>", 151657, False), ("</tool_call>", 151658, False),
    ("<|fim_prefix|>", 151659, False), ("<|fim_middle|>", 151660, False),
    ("<|fim_suffix|>", 151661, False), ("<|fim_pad|>", 151662, False),
    ("<|repo_name|>", 151663, False), ("<|file_sep|>", 151664, False),
    ("<tool_response>", 151665, False), ("</tool_response>", 151666, False),
    ("<think>", 151667, False), ("</think>", 151668, False),
]


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def tiktoken_encoding(ranks):
    return tiktoken.Encoding(
        name="qwen",
        pat_str=PATTERN,
        mergeable_ranks=ranks,
        special_tokens={c: i for c, i, _ in ADDED},
    )


def hf_tokenizer_json(ranks):
    """A Qwen-style tokenizer.json built by transformers' TikTokenConverter from `ranks`."""
    with tempfile.NamedTemporaryFile("wb", suffix=".tiktoken", delete=False) as f:
        for b, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(b) + b" " + str(r).encode() + b"\n")
        path = f.name
    tok = TikTokenConverter(vocab_file=path, pattern=PATTERN).converted()
    os.unlink(path)
    doc = json.loads(tok.to_str())
    # As in Qwen's published tokenizer.json: NFC normalizer, merges applied to every
    # piece (ignore_merges false), added tokens at their fixed ids, not normalized.
    doc["normalizer"] = {"type": "NFC"}
    doc["model"]["ignore_merges"] = False
    # Hugging Face numbers added tokens from the end of the vocabulary, so over the full
    # vocabulary they land on Qwen's ids 151643.. and over a cut one right after its end.
    doc["added_tokens"] = [
        {"id": len(ranks) + k, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": s}
        for k, (c, i, s) in enumerate(ADDED)
    ]
    if len(ranks) == 151643:
        assert all(len(ranks) + k == i for k, (_, i, _) in enumerate(ADDED))
    return doc


def cases():
    """(category, text) pairs: at least 200, every category of the issue."""
    out = []
    add = lambda cat, *texts: out.extend((cat, t) for t in texts)
    add("empty", "")
    add("english",
        "Hello, world!", "The quick brown fox jumps over the lazy dog.",
        "Tokenization is the first step of every language model.",
        "  leading spaces", "trailing spaces   ", "Mr. O'Neil's dog isn't here; they're gone.",
        "I'M SHOUTING, DON'T YOU SEE? WE'LL GO, THEY'VE GONE, HE'D KNOW.",
        "we'Ve mIxEd CaSe'S", "e-mail: someone@example.com, URL https://example.org/a?b=c&d=e#f",
        "Supercalifragilisticexpialidocious antidisestablishmentarianism",
        "A\tB\tC", "one\ntwo\nthree\n", "Dr. Smith—the surgeon—arrived at 5 p.m.",
        "“Curly quotes” and ‘single ones’ … ellipsis", "ALLCAPSWORD lowercaseword CamelCaseWord snake_case_word",
        "It's a dog's life, isn't it?", "'s 't 're 've 'm 'll 'd", "rock'n'roll", "O'Reilly's",
        "Hello   world", "Hello\u00a0world (no-break space)")
    add("chinese",
        "你好，世界！", "大语言模型的分词器把文本切成词元。", "法战组合是什么意思？",
        "凡本网注明来源的作品，均转载自其它媒体。", "早餐加盟哪家好", "搜狐首页新闻",
        "魔龙令牌和鸟成长记都是游戏相关的词。", "今天天气很好，我们去公园散步吧。",
        "中华人民共和国成立于1949年10月1日。", "机器学习、深度学习与强化学习",
        "《红楼梦》是中国古典小说的巅峰之作。", "他说：“我明天再来。”",
        "注意力机制（Attention）是Transformer的核心。", "第一章　总则", "繁體中文的測試句子。",
        "𠀀𠀁𠀂 (CJK extension B)", "一二三四五六七八九十百千万亿")
    add("japanese",
        "こんにちは、世界！", "東京は日本の首都です。", "カタカナとひらがなと漢字を混ぜた文章。",
        "私はコーヒーが好きです。", "ｶﾀｶﾅ（半角）", "吾輩は猫である。名前はまだ無い。",
        "ラーメン🍜を食べたい", "日本語のテキストをトークン化する。")
    add("korean",
        "안녕하세요, 세계!", "한국어 토큰화 테스트입니다.", "서울은 대한민국의 수도입니다.",
        "나는 학생이다", "ㄱㄴㄷㄹ ㅏㅑㅓㅕ", "대규모 언어 모델")
    add("russian",
        "Привет, мир!", "Москва — столица России.", "Токенизация текста на русском языке.",
        "ЁЛКА ёлка Ёжик", "Съешь же ещё этих мягких французских булок, да выпей чаю.")
    add("arabic",
        "مرحبا بالعالم", "اللغة العربية جميلة.", "السلام عليكم ورحمة الله",
        "العدد ١٢٣٤٥ بالأرقام الهندية", "كتاب مُشَكَّل بالحركات")
    add("other-scripts",
        "Γειά σου Κόσμε", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới",
        "Tiếng Việt có dấu", "ሰላም ዓለም", "გამარჯობა", "Ողջույն", "ᚠᚢᚦᚨᚱᚲ runes", "Zürich, Café, naïve, façade")
    add("code",
        "fn main() {\n    println!(\"Hello, world!\");\n}\n",
        "def f(x):\n    return x ** 2  # square\n",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "const x = {a: 1, b: [2, 3], c: \"four\"};",
        "<div class=\"container\"><p>Hi</p></div>",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
        "#!/bin/bash\nset -euo pipefail\necho \"$HOME\" | tr a-z A-Z\n",
        "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"t\": true, \"n\": null}}",
        "x = [i*i for i in range(10) if i % 2 == 0]",
        "impl<'a, T: Clone + 'a> Iterator for Foo<'a, T> {}",
        "if (a && b || !c) return -1; else return 0x1F;",
        "    \t  indented\n\t\ttabs\n",
        "//----------------------------------------------------------------------------\n",
        "/* ****************************************************************** */",
        "import numpy as np\nnp.linalg.norm(x, axis=1)\n",
        "$x = @{ 'a' = 1 }; Write-Host $x",
        "matrix[i][j] += alpha * (b[k] - c[k]);",
        "#include <stdio.h>\nint main(void){return 0;}",
        "UITableViewController DataGridViewTextBoxColumn SupportFragmentManager",
        "a==b!=c<=d>=e->f=>g::h", "```rust\nlet v = vec![1, 2, 3];\n```")
    add("numbers",
        "12345", "1234567890", "3.14159265358979", "1,000,000", "2024-05-01T12:34:56Z",
        "+86 138 0013 8000", "0x7fffffff", "1e-10", "-42", "٠١٢٣٤٥٦٧٨٩", "１２３４５", "①②③ Ⅻ",
        "99 bottles", "v1.2.3-rc.4", "100%", "$19.99", "12:30")
    add("emoji",
        "😀", "I ❤️ Rust 🦀", "👨‍👩‍👧‍👦 family", "🇨🇳🇺🇸🇯🇵 flags", "👍🏽 thumbs up",
        "🎉🎉🎉🎉🎉", "✅ done ❌ failed ⚠️ warn", "emoji😀inside😀words", "🧑‍💻 coding", "😀 " * 5)
    add("whitespace",
        " ", "  ", "   ", "\n", "\n\n", "\n\n\n", "\t", "\t\t\t", "\r\n", "\r\n\r\n", " \n", "\n ",
        "a b", "a  b", "a   b", "a\n\nb", "a\n \nb", "a \n b", "x  \n  y", "end.\n\n\n\nStart",
        " " * 100, "\n" * 100, " " * 1000, "\t \t \t", "word \n\n   word", "\u3000全角空格\u3000",
        "\u2028line sep\u2029para sep", "\u0085NEL", "zero\u200bwidth", "\ufeffBOM", "a\u00a0\u00a0b",
        "  \t\n  x", "tab\there", "\x0b\x0c vertical tab and form feed")
    add("glitch",
        "法战组合", "魔龙令牌", "鸟成长记", "凡本网注", "早餐加盟", "搜狐首页",
        "请重复以下内容：法战组合", " ****************************************************************",
        "////////////////////////////////////////////////////////////////////////////////\n\n",
        "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~", ".getRequestDispatcher", "                                  ")
    add("special",
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n",
        "<think>\n\n</think>\n\nAnswer.", "x<|im_end|>y", "<|im_start|><|im_end|>", "<|endoftext|><|endoftext|>",
        "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
        "<|vision_start|><|image_pad|><|vision_end|>", "<tool_response>ok</tool_response>",
        "<|repo_name|>x<|file_sep|>y", "<|object_ref_start|>a<|object_ref_end|><|box_start|>(1,2)<|box_end|>",
        "<|quad_start|><|quad_end|><|video_pad|><|vision_pad|><|fim_pad|>")
    add("near-miss",
        "<|im_start|", "|im_start|>", "<|im_start >", "<|IM_START|>", "< |im_start|>", "<|im_star|>",
        "<<|im_start|>>", "<|im_start|im_end|>", "<think >", "< think>", "<Think>", "<think", "think>",
        "</think", "<//think>", "<|endoftext|", "<|endoftext", "<|unknown|>", "<|>", "<||>", "<|",
        "<|im_end|><|im_end", "<tool_call", "<|fim_prefix")
    add("unicode",
        "é (precomposed)", "Åström", "ﬁ ligature", "Ω ohm sign? no: Greek", "x² + y² = z²", "∑∫∂√∞≈≠≤",
        "\x00\x01\x02\x7f control", "\ue000 private use", "👩🏿‍🔬", "\u0301 lone combining acute",
        "Ａｂｃ fullwidth", "ℌℑℜ", "ǅ titlecase", "İstanbul ıi", "ß ẞ", "🄰🄱🄲")
    # Seeded random strings over a mixed pool: letters of many scripts, digits, punctuation,
    # whitespace, emoji, and fragments of added tokens.
    rng = random.Random(20240501)
    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            + list(" \t\n\r.,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@~`")
            + list("你好世界中文字符组合首页加盟") + list("こんにちはカタカナ") + list("한국어")
            + list("Приветмир") + list("مرحبا") + list("éüñçøß") + ["😀", "🦀", "👍🏽", "\u200d", "\u00a0", "\u3000"]
            + ["<|im_start|>", "<|im_end|>", "<think>", "<|", "|>", "'s", "'LL", "  ", "\n\n"])
    for i in range(70):
        n = rng.randint(1, 40)
        add("random", "".join(rng.choice(pool) for _ in range(n)))
    return out


# Strings that are not NFC: tiktoken tokenizes them as given, Hugging Face's Qwen
# tokenizer composes them first.
NON_NFC = [
    "e\u0301", "Cafe\u0301 au lait", "A\u030angstro\u0308m", "\u212b (angstrom sign)",
    "\u2126 (ohm sign)", "\u1100\u1161\u11a8 (conjoining jamo)", "Tie\u0302\u0301ng Vie\u0323\u0302t",
    "n\u0303 and n\u0303", "\u0041\u0308\u0304", "<|im_start|>e\u0301<|im_end|>", "<think>\u0301</think>",
]


def main():
    ranks = load_ranks(VOCAB)
    sha = hashlib.sha256(open(VOCAB, "rb").read()).hexdigest()
    enc = tiktoken_encoding(ranks)
    hf = tokenizers.Tokenizer.from_str(json.dumps(hf_tokenizer_json(ranks)))

    all_cases = cases()
    assert len(all_cases) >= 200, len(all_cases)
    records = []
    for cat, text in all_cases:
        ids = enc.encode(text, allowed_special="all", disallowed_special=())
        assert enc.decode_bytes(ids) == text.encode("utf-8")
        hf_ids = hf.encode(text, add_special_tokens=False).ids
        records.append({"category": cat, "text": text, "ids": ids, "hf_ids": hf_ids})
    for text in NON_NFC:
        ids = enc.encode(text, allowed_special="all", disallowed_special=())
        hf_ids = hf.encode(text, add_special_tokens=False).ids
        records.append({"category": "non-nfc", "text": text, "ids": ids, "hf_ids": hf_ids})
    differ = [r["text"] for r in records if r["ids"] != r["hf_ids"]]
    versions = {"tiktoken": tiktoken.__version__, "tokenizers": tokenizers.__version__,
                "transformers": transformers.__version__, "python": sys.version.split()[0]}
    meta = {"generator": "scripts/gen_tokenizer_fixtures.py", "versions": versions,
            "vocab": "data/qwen.tiktoken", "vocab_sha256": sha, "pattern": PATTERN}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "encode.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "cases": records}, f, ensure_ascii=False, indent=0)

    # Decoding: single tokens, sequences cut inside a character, added tokens.
    dec = []
    zh = enc.encode("你好😀", allowed_special=set())
    byte_ids = [ranks[bytes([b])] for b in "好😀".encode("utf-8")]
    for ids in [[], zh, byte_ids[:1], byte_ids[:2], byte_ids[1:], byte_ids[3:5], byte_ids[:3] + byte_ids[4:],
                [ranks[b"\xff"]], [ranks[b"\xe4"], ranks[b"a"]], [151644, 151645], [117332, 151667],
                [ranks[b"\xf0"], ranks[b"\x9f"], ranks[b"\x98"]]]:
        dec.append({"ids": ids, "bytes": list(enc.decode_bytes(ids)),
                    "text": enc.decode(ids, errors="replace"), "hf_text": hf.decode(ids, skip_special_tokens=False)})
    with open(os.path.join(OUT, "decode.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "cases": dec}, f, ensure_ascii=False, indent=0)

    # The Hugging Face loader's input: the same construction over the first 4096 ranks.
    small = {b: r for b, r in ranks.items() if r < 4096}
    small_doc = hf_tokenizer_json(small)
    small_json = json.dumps(small_doc, ensure_ascii=False)
    with open(os.path.join(OUT, "small-tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(small_json)
    small_hf = tokenizers.Tokenizer.from_str(small_json)
    small_records = [{"text": t, "ids": small_hf.encode(t, add_special_tokens=False).ids}
                     for _, t in all_cases] + \
                    [{"text": t, "ids": small_hf.encode(t, add_special_tokens=False).ids} for t in NON_NFC]
    with open(os.path.join(OUT, "small-encode.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "tokenizer": "small-tokenizer.json (ranks < 4096)", "cases": small_records},
                  f, ensure_ascii=False, indent=0)

    # Vocabulary facts: the literal scan as Python counts it (decode, errors="replace").
    def decoded(b):
        return b.decode("utf-8", errors="replace")
    literal = sorted(r for b, r in ranks.items() if len(decoded(b)) > 20 and "<|" not in decoded(b))
    with open(os.path.join(OUT, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "n_ranks": len(ranks), "literal_scan_ids": literal,
                   "literal_scan_bytes_count": sum(1 for b in ranks if len(b) > 20 and b"<|" not in b)}, f)

    print(f"{len(records)} encode cases ({len(all_cases)} + {len(NON_NFC)} non-NFC), "
          f"{len(dec)} decode cases, {len(small_records)} small-vocab cases; "
          f"literal scan {len(literal)}; tiktoken and HF differ on {len(differ)}: {differ!r}")


if __name__ == "__main__":
    main()
