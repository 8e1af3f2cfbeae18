#!/usr/bin/env python3
"""Fixture for chapter 11's GGUF tokenizer: a vocabulary-only GGUF file carrying Qwen's
vocabulary the way llama.cpp's converter writes it for Qwen2 / Qwen3, and llama.cpp's own
tokenization of the chapter's strings with it.

Run:  /work/peers/llama/bin/python scripts/gen_gguf_tokenizer_fixture.py
Uses: gguf (gguf-py) 0.19.0, llama-cpp-python 0.3.36 (llama.cpp vendored in its sdist),
numpy; versions are written into tests/fixtures/gguf_tokenizer/expected.json.

The file (tests/fixtures/gguf_tokenizer/qwen3_vocab.gguf):
  - general.architecture qwen3moe with Qwen3-30B-A3B's hyper-parameters (llama.cpp reads
    them even for a vocab-only load) and no tensors;
  - tokenizer.ggml.model "gpt2", tokenizer.ggml.pre "qwen2";
  - tokenizer.ggml.tokens: data/qwen.tiktoken's 151,643 ranks as GPT-2 byte-to-unicode
    strings (rank = id), Qwen3's 26 added tokens (src/tokenizer/special.rs) at 151643..151668
    as plain text, and "[PAD{i}]" up to Qwen3's vocab_size 151,936, as the converter pads;
  - tokenizer.ggml.token_type: 1 normal, 3 control (special, or looking like <|...|>, the
    converter's rule), 4 user-defined (the other added tokens), 5 unused (the padding);
  - tokenizer.ggml.merges: for each rank ≥ 256 in rank order, the two parts that byte-rank
    BPE restricted to lower ranks leaves (how a tiktoken vocabulary becomes a merge list);
  - bos 151643, eos 151645, padding 151643, add_bos_token false (Qwen3's tokenizer_config
    and config.json), tokenizer.chat_template = tests/fixtures/chat/qwen3_chat_template.jinja.
Then llama.cpp loads it with vocab_only and tokenizes every text of
tests/fixtures/tokenizer/encode.json plus a few more (add_bos false, special true), and
turns the ids back into bytes token by token (llama_token_to_piece, special true).
"""

import base64
import ctypes
import json
from importlib.metadata import version
from pathlib import Path

import gguf
import llama_cpp

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "gguf_tokenizer"
GGUF_PATH = OUT / "qwen3_vocab.gguf"
VOCAB_SIZE = 151936  # Qwen3's config.json vocab_size (the embedding's rows)

# Copied from src/tokenizer/special.rs (QWEN3_ADDED_TOKENS): content, id, special.
ADDED = [
    ("<|endoftext|>", 151643, True), ("<|im_start|>", 151644, True),
    ("<|im_end|>", 151645, True), ("<|object_ref_start|>", 151646, True),
    ("<|object_ref_end|>", 151647, True), ("<|box_start|>", 151648, True),
    ("<|box_end|>", 151649, True), ("<|quad_start|>", 151650, True),
    ("<|quad_end|>", 151651, True), ("<|vision_start|>", 151652, True),
    ("<|vision_end|>", 151653, True), ("<|vision_pad|>", 151654, True),
    ("<|image_pad|>", 151655, True), ("<|video_pad|>", 151656, True),
    ("<tool_call>", 151657, False), ("</tool_call>", 151658, False),
    ("<|fim_prefix|>", 151659, False), ("<|fim_middle|>", 151660, False),
    ("<|fim_suffix|>", 151661, False), ("<|fim_pad|>", 151662, False),
    ("<|repo_name|>", 151663, False), ("<|file_sep|>", 151664, False),
    ("<tool_response>", 151665, False), ("</tool_response>", 151666, False),
    ("<think>", 151667, False), ("</think>", 151668, False),
]

EXTRA_TEXTS = [
    "<|im_start|>user\nHow many r's are in strawberry?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "0 1 22 333 4444 55555 666666",
    "3.14159265358979323846",
    "\t\t  \n\n\n   \r\n x",
    "😀😃😄😁🦀🦀🦀",
    "机器学习是人工智能的一个分支。",
    "<|fim_prefix|>def f(x):<|fim_suffix|>    return x<|fim_middle|>",
    "<tool_call>{\"name\": \"get\"}</tool_call>",
    "[PAD151700]",
]


def byte_to_unicode():
    """GPT-2's printable stand-ins for the 256 bytes."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def two_parts(ranks, token, rank):
    """Byte-rank BPE on `token` using only ranks below `rank`: the parts it stops at."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def build_gguf():
    ranks = {}
    for line in (ROOT / "data" / "qwen.tiktoken").read_text().splitlines():
        if line.strip():
            b64, r = line.split(" ")
            ranks[base64.b64decode(b64)] = int(r)
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    assert [r for _, r in by_rank] == list(range(len(by_rank)))
    b2u = byte_to_unicode()
    text = lambda bs: "".join(b2u[b] for b in bs)

    tokens = [text(bs) for bs, _ in by_rank]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for content, i, special in ADDED:
        assert i == len(tokens)
        tokens.append(content)
        looks_special = content.startswith("<|") and content.endswith("|>")
        types.append(gguf.TokenType.CONTROL if special or looks_special else gguf.TokenType.USER_DEFINED)
    while len(tokens) < VOCAB_SIZE:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(gguf.TokenType.UNUSED)

    merges = []
    for bs, r in by_rank:
        if len(bs) == 1:
            continue
        parts = two_parts(ranks, bs, r)
        assert len(parts) == 2, (bs, parts)
        merges.append(f"{text(parts[0])} {text(parts[1])}")

    w = gguf.GGUFWriter(str(GGUF_PATH), "qwen3moe")
    w.add_name("Qwen3 vocabulary (llm-anatomy fixture)")
    # Qwen3-30B-A3B's config.json, as the converter writes it.
    w.add_block_count(48)
    w.add_context_length(40960)
    w.add_embedding_length(2048)
    w.add_feed_forward_length(6144)
    w.add_head_count(32)
    w.add_head_count_kv(4)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(128)
    w.add_expert_used_count(8)
    w.add_key_length(128)
    w.add_value_length(128)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_expert_feed_forward_length(768)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(151643)
    w.add_eos_token_id(151645)
    w.add_pad_token_id(151643)
    w.add_add_bos_token(False)
    w.add_chat_template((ROOT / "tests/fixtures/chat/qwen3_chat_template.jinja").read_text())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(tokens), len(merges)


def piece(vocab, token):
    buf = (ctypes.c_char * 256)()
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, 256, 0, True)
    assert 0 <= n <= 256, (token, n)
    return bytes(buf[:n])


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    n_tokens, n_merges = build_gguf()

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(GGUF_PATH).encode(), params)
    assert model, "llama.cpp refused the vocab-only file"
    vocab = llama_cpp.llama_model_get_vocab(model)
    assert llama_cpp.llama_vocab_n_tokens(vocab) == n_tokens

    def tokenize(text):
        data = text.encode()
        cap = len(data) + 16
        out = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), out, cap, False, True)
        assert n >= 0, (text, n)
        return list(out[:n])

    texts = [c["text"] for c in json.loads((ROOT / "tests/fixtures/tokenizer/encode.json").read_text())["cases"]]
    cases = []
    for t in texts + EXTRA_TEXTS:
        ids = tokenize(t)
        back = b"".join(piece(vocab, i) for i in ids)
        cases.append({"text": t, "ids": ids, "decoded": back.decode("utf-8", errors="replace"),
                      "decoded_is_text": back == t.encode()})
    specials = {
        "bos": llama_cpp.llama_vocab_bos(vocab),
        "eos": llama_cpp.llama_vocab_eos(vocab),
        "pad": llama_cpp.llama_vocab_pad(vocab),
        "n_tokens": llama_cpp.llama_vocab_n_tokens(vocab),
    }
    llama_cpp.llama_model_free(model)
    doc = {
        "generator": "scripts/gen_gguf_tokenizer_fixture.py",
        "versions": {"gguf": version("gguf"), "llama_cpp_python": llama_cpp.__version__},
        "gguf": GGUF_PATH.name,
        "gguf_size": GGUF_PATH.stat().st_size,
        "n_tokens": n_tokens,
        "n_merges": n_merges,
        "llama_cpp": specials,
        "cases": cases,
    }
    (OUT / "expected.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{GGUF_PATH}: {GGUF_PATH.stat().st_size} bytes, {n_tokens} tokens, {n_merges} merges, "
          f"{len(cases)} cases, {sum(not c['decoded_is_text'] for c in cases)} not decoding back")


if __name__ == "__main__":
    main()
