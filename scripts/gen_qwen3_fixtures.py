#!/usr/bin/env python3
"""Fixtures for chapter 9 (the Qwen3-MoE forward pass): tiny random Hugging Face
checkpoints written by transformers' own `save_pretrained`, with what transformers computes
on them — the logits of a fixed prompt, the greedy continuation (with the KV cache), and
each MoE layer's router top-k.

Run:  /work/pyenv/bin/python scripts/gen_qwen3_fixtures.py
Uses: torch 2.15, transformers 5.24, safetensors, numpy (versions written into each case).

Each case is a directory tests/fixtures/qwen3/<case>/ holding
  config.json            as save_pretrained wrote it (transformers 5.x style:
                         rope_parameters, num_local_experts, dtype)
  config_4x.json         the same model in the transformers 4.x / official-release style
                         (rope_theta + rope_scaling, num_experts, torch_dtype); checked
                         here to load in transformers to bit-identical logits
  model.safetensors      or model-0000i-of-0000n.safetensors + model.safetensors.index.json
  expected.safetensors   "logits" F32 [seq, vocab]
  expected.json          prompt ids, greedy continuation, router top-k per MoE layer,
                         the margins that make them well defined, versions
and data/tiny-qwen3-moe/ is the bundled checkpoint `anatomy tour` runs.

Every random draw comes from a fixed seed. Weights are drawn with a larger standard
deviation than real initialisation and every norm weight is perturbed away from 1, so a
missing norm, a swapped gate/up or a wrong RoPE pairing changes the logits by far more
than 1e-4; seeds are advanced (deterministically) until the greedy top-1/top-2 logit gap
and the router's k-th/(k+1)-th logit gap are wide enough that the rounding differences of
another implementation (~1e-6) cannot flip them.
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "qwen3"
BUNDLED = ROOT / "data" / "tiny-qwen3-moe"

VERSIONS = {
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "safetensors": safetensors.__version__,
    "numpy": np.__version__,
}

GREEDY_TOKENS = 8
MIN_GREEDY_GAP = 2e-3  # top-1 minus top-2 logit at every greedy step
MIN_ROUTER_GAP = 1e-3  # k-th minus (k+1)-th router logit at every prompt position

BASE = dict(
    vocab_size=96,
    hidden_size=24,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,  # 4 heads × 8 = 32 ≠ hidden 24, as in Qwen3-30B-A3B (32 × 128 ≠ 2048)
    moe_intermediate_size=12,
    num_experts=6,
    num_experts_per_tok=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    norm_topk_prob=True,
    initializer_range=0.25,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)

# name: (config overrides, options)
CASES = {
    "head_dim_gqa": (
        dict(num_hidden_layers=3),
        dict(note="head_dim × heads (32) ≠ hidden (24); GQA 4 query heads on 2 KV heads"),
    ),
    "mixed_layers": (
        dict(num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3]),
        dict(note="decoder_sparse_step 2 + mlp_only_layers [3]: layers 0, 2, 3 dense, 1 MoE"),
    ),
    "norm_topk_false": (
        dict(norm_topk_prob=False, num_experts=8, num_experts_per_tok=3),
        dict(note="norm_topk_prob false (the class default): top-k softmax weights not renormalised"),
    ),
    "tied": (
        dict(tie_word_embeddings=True),
        dict(note="tie_word_embeddings: lm_head is embed_tokens"),
    ),
    "yarn": (
        dict(
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 16,
            },
            max_position_embeddings=64,
        ),
        dict(prompt_len=40, note="YaRN factor 4 over an original context of 16; prompt of 40"),
    ),
    "bf16_sharded": (
        dict(),
        dict(dtype=torch.bfloat16, max_shard_size="12KB",
             note="bf16 weights in several shards with model.safetensors.index.json"),
    ),
    "fused": (
        dict(),
        dict(fused=True, note="fused experts: gate_up_proj [E, 2I, H] and down_proj [E, H, I]"),
    ),
    "fused_f16": (
        dict(num_hidden_layers=3),
        dict(fused=True, dtype=torch.float16, note="fused experts stored in f16"),
    ),
    "bias_sliding": (
        dict(attention_bias=True, use_sliding_window=True, sliding_window=5),
        dict(note="attention biases and a sliding window of 5 on a prompt of 12"),
    ),
    "dense_qwen3": (
        dict(
            num_hidden_layers=3,
            use_sliding_window=True,
            sliding_window=4,
            max_window_layers=1,
            attention_bias=True,
        ),
        dict(dense=True, note="dense Qwen3ForCausalLM; layers ≥ 1 use a sliding window of 4"),
    ),
}


def make_config(overrides, dense):
    kw = dict(BASE)
    kw.update(overrides)
    if dense:
        for k in ["moe_intermediate_size", "num_experts", "num_experts_per_tok", "norm_topk_prob"]:
            kw.pop(k)
        return Qwen3Config(**kw), Qwen3ForCausalLM
    return Qwen3MoeConfig(**kw), Qwen3MoeForCausalLM


def randomise(model, seed, std):
    """Every parameter drawn anew: matrices N(0, std²), norm weights 1 + N(0, 0.2²),
    biases N(0, 0.1²)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(std * noise)


def to_4x(cfg5):
    """A transformers-5 config.json rewritten as transformers 4.x / the official releases
    write it."""
    c = dict(cfg5)
    rp = dict(c.pop("rope_parameters"))
    c["rope_theta"] = rp.pop("rope_theta")
    kind = rp.get("rope_type", "default")
    c["rope_scaling"] = None if kind == "default" else rp
    if "num_local_experts" in c:
        c["num_experts"] = c.pop("num_local_experts")
    c["torch_dtype"] = c.pop("dtype")
    c.pop("layer_types", None)  # 4.x Qwen3 derives them from max_window_layers
    c["transformers_version"] = "4.51.0"
    return c


def fuse_experts(directory, num_layers, num_experts):
    """Rewrites per-expert tensors into transformers 5's fused layout, in place."""
    path = directory / "model.safetensors"
    tensors = load_file(path)
    out = {}
    for name, t in tensors.items():
        if ".mlp.experts." not in name:
            out[name] = t
    for layer in range(num_layers):
        pre = f"model.layers.{layer}.mlp.experts"
        if f"{pre}.0.gate_proj.weight" not in tensors:
            continue
        gate_up = [
            torch.cat([tensors[f"{pre}.{e}.gate_proj.weight"], tensors[f"{pre}.{e}.up_proj.weight"]], 0)
            for e in range(num_experts)
        ]
        out[f"{pre}.gate_up_proj"] = torch.stack(gate_up).contiguous()
        out[f"{pre}.down_proj"] = torch.stack(
            [tensors[f"{pre}.{e}.down_proj.weight"] for e in range(num_experts)]
        ).contiguous()
    save_file(out, path, metadata={"format": "pt"})


def reference(model_cls, directory, prompt):
    """What transformers computes, in f32, on the checkpoint as stored on disk."""
    model = model_cls.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        moe = model_cls is Qwen3MoeForCausalLM
        out = model(ids, output_router_logits=moe) if moe else model(ids)
        logits = out.logits[0].float()
        gen = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=GREEDY_TOKENS,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
            eos_token_id=None,
        )[0, len(prompt):].tolist()
        # Margins along the greedy path (one uncached forward over prompt + continuation).
        full = model(torch.tensor([prompt + gen])).logits[0]
        steps = full[len(prompt) - 1 : len(prompt) - 1 + GREEDY_TOKENS]
        top2 = torch.topk(steps, 2, dim=-1).values
        greedy_gap = float((top2[:, 0] - top2[:, 1]).min())
        router = {}
        router_gap = float("inf")
        if moe:
            cfg = model.config
            moe_layers = [
                i
                for i in range(cfg.num_hidden_layers)
                if i not in cfg.mlp_only_layers and (i + 1) % cfg.decoder_sparse_step == 0
            ]
            assert len(moe_layers) == len(out.router_logits)
            k = cfg.num_experts_per_tok
            for layer, rl in zip(moe_layers, out.router_logits):
                probs = torch.softmax(rl.float(), dim=-1)
                w, idx = torch.topk(probs, k, dim=-1)
                if cfg.norm_topk_prob:
                    w = w / w.sum(-1, keepdim=True)
                sorted_logits = torch.sort(rl.float(), dim=-1, descending=True).values
                router_gap = min(router_gap, float((sorted_logits[:, k - 1] - sorted_logits[:, k]).min()))
                router[str(layer)] = {"experts": idx.tolist(), "weights": w.tolist()}
    return logits, gen, router, greedy_gap, router_gap


def build_case(name, overrides, opts, out_dir):
    dense = opts.get("dense", False)
    config, model_cls = make_config(overrides, dense)
    prompt_len = opts.get("prompt_len", 12)
    base_seed = 1000 + sorted(CASES).index(name) * 100 if name in CASES else 7
    for attempt in range(50):
        seed = base_seed + attempt
        torch.manual_seed(seed)
        model = model_cls(config)
        randomise(model, seed, config.initializer_range)
        dtype = opts.get("dtype", torch.float32)
        model = model.to(dtype)
        rng = np.random.default_rng(seed)
        prompt = [int(x) for x in rng.integers(0, config.vocab_size, prompt_len)]
        if out_dir.exists():
            shutil.rmtree(out_dir)
        save_kw = {}
        if "max_shard_size" in opts:
            save_kw["max_shard_size"] = opts["max_shard_size"]
        model.save_pretrained(out_dir, **save_kw)
        if opts.get("fused"):
            fuse_experts(out_dir, config.num_hidden_layers, config.num_experts)
        logits, gen, router, greedy_gap, router_gap = reference(model_cls, out_dir, prompt)
        if greedy_gap >= MIN_GREEDY_GAP and router_gap >= MIN_ROUTER_GAP:
            break
        print(f"  {name}: seed {seed} margins {greedy_gap:.2e} / {router_gap:.2e}, next seed")
    else:
        sys.exit(f"{name}: no seed with wide enough margins")

    # The same model under a 4.x-style config must load to the same logits.
    cfg5 = json.loads((out_dir / "config.json").read_text())
    cfg4 = to_4x(cfg5)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for f in out_dir.iterdir():
            if f.name != "config.json":
                shutil.copy(f, tmp / f.name)
        (tmp / "config.json").write_text(json.dumps(cfg4, indent=2))
        logits4, *_ = reference(model_cls, tmp, prompt)
        assert torch.equal(logits4, logits), f"{name}: 4.x config changes the logits"
    (out_dir / "config_4x.json").write_text(json.dumps(cfg4, indent=2) + "\n")

    if opts.get("fused"):
        # transformers itself reads the fused file: its logits must equal the
        # per-expert checkpoint's (re-saved without fusing, same seed).
        with tempfile.TemporaryDirectory() as tmp:
            torch.manual_seed(seed)
            m = model_cls(config)
            randomise(m, seed, config.initializer_range)
            m.to(opts.get("dtype", torch.float32)).save_pretrained(tmp)
            per_expert, *_ = reference(model_cls, Path(tmp), prompt)
            # Equal parameters; only the matmul's summation order may differ (~1e-7).
            diff = float((per_expert - logits).abs().max())
            assert diff < 1e-5, f"{name}: fused layout read differently ({diff})"

    save_file({"logits": logits.contiguous()}, out_dir / "expected.safetensors")
    expected = {
        "case": name,
        "note": opts.get("note", ""),
        "model_class": model_cls.__name__,
        "seed": seed,
        "prompt": prompt,
        "greedy": gen,
        "router": router,
        "min_greedy_gap": greedy_gap,
        "min_router_gap": router_gap if router else None,
        "versions": VERSIONS,
    }
    (out_dir / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    size = sum(f.stat().st_size for f in out_dir.iterdir())
    print(f"{name}: seed {seed}, {size / 1024:.0f} KiB, greedy {gen}, "
          f"gaps {greedy_gap:.2e} / {router_gap:.2e}")


# The toy grammar the bundled model is trained on: every word is one Qwen token with its
# leading space, so each token has exactly one word class.
GRAMMAR = {
    "noun": "cat dog bird child teacher farmer river house book garden king queen horse tree "
    "boat doctor girl boy city road".split(),
    "verb": "saw found liked chased painted carried watched helped followed opened visited "
    "heard pushed built loved".split(),
    "adjective": "small red old quiet happy green tall dark young bright cold brave".split(),
    "determiner": ["the", "a"],
    "conjunction": ["and"],
    "punctuation": [".", "!", "?", ","],
}


def qwen_encoding():
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_tokenizer_fixtures as gt  # the tokenizer chapter's tiktoken setup

    return gt.tiktoken_encoding(gt.load_ranks(gt.VOCAB))


def toy_sentences(rng, n):
    """Sentences as lists of (class, word): NP verb NP [, and NP verb NP] end-mark."""

    def noun_phrase():
        words = [("determiner", str(rng.choice(GRAMMAR["determiner"])))]
        if rng.random() < 0.4:
            words.append(("adjective", str(rng.choice(GRAMMAR["adjective"]))))
        words.append(("noun", str(rng.choice(GRAMMAR["noun"]))))
        return words

    out = []
    for _ in range(n):
        s = noun_phrase() + [("verb", str(rng.choice(GRAMMAR["verb"])))] + noun_phrase()
        if rng.random() < 0.4:
            s += [("punctuation", ","), ("conjunction", "and")]
            s += noun_phrase() + [("verb", str(rng.choice(GRAMMAR["verb"])))] + noun_phrase()
        s.append(("punctuation", str(rng.choice([".", ".", "!", "?"]))))
        out.append(s)
    return out


def render(enc, sentences):
    """Text, token ids and the word class of every token."""
    text, ids, classes = "", [], []
    for s in sentences:
        for i, (cls, w) in enumerate(s):
            piece = w if cls == "punctuation" else " " + (w.capitalize() if i == 0 else w)
            t = enc.encode(piece)
            assert len(t) == 1, f"{piece!r} is not one token"
            text += piece
            ids += t
            classes.append(cls)
    assert enc.encode(text) == ids, "word-by-word ids differ from the text's"
    return text, ids, classes


def class_table(router_topk, classes, num_experts):
    """Per layer, per class: the fraction of that class's expert slots each expert got."""
    table = {}
    for layer, topk in router_topk.items():
        rows = {}
        for cls in GRAMMAR:
            slots = [e for t, c in zip(topk, classes) if c == cls for e in t]
            counts = np.bincount(slots, minlength=num_experts)
            rows[cls] = [round(float(x), 4) for x in counts / max(1, counts.sum())]
        table[layer] = rows
    return table


def build_bundled():
    """data/tiny-qwen3-moe: a tiny Qwen3-MoE with Qwen's real vocabulary size (so the Qwen
    tokenizer's ids are valid), hidden 16, tied embeddings, bf16, about 5 MB — trained for
    a few hundred steps on a toy grammar so its router has word classes to tell apart."""
    enc = qwen_encoding()
    for cls in ["noun", "verb", "adjective"]:
        GRAMMAR[cls] = [w for w in GRAMMAR[cls] if len(enc.encode(" " + w)) == 1]
    rng = np.random.default_rng(0)
    _, train_ids, _ = render(enc, toy_sentences(rng, 4000))
    used = sorted(set(train_ids))
    compact = {t: i for i, t in enumerate(used)}

    kw = dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        moe_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        router_aux_loss_coef=0.01,
        bos_token_id=151643,
        eos_token_id=151645,
    )
    # Training runs on a compact vocabulary (the grammar's tokens only): the full
    # 151 936-row softmax would make each step ~100× slower for rows it never sees.
    torch.manual_seed(0)
    torch.set_num_threads(2)
    small = Qwen3MoeForCausalLM(Qwen3MoeConfig(vocab_size=len(used), **kw))
    opt = torch.optim.AdamW(small.parameters(), lr=1e-2, weight_decay=0.0)
    data = torch.tensor([compact[t] for t in train_ids])
    steps, batch, seq = 300, 16, 48
    losses = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - seq - 1, (batch,))
        x = torch.stack([data[s : s + seq] for s in starts])
        out = small(x, labels=x, output_router_logits=True)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(out.loss.detach()))

    # The full-vocabulary model: the trained weights, the grammar's rows of the embedding
    # put back at their Qwen ids, every other row N(0, 0.02²) as at initialisation.
    config = Qwen3MoeConfig(vocab_size=151936, **kw)
    model = Qwen3MoeForCausalLM(config)
    with torch.no_grad():
        state = small.state_dict()
        g = torch.Generator().manual_seed(1)
        emb = 0.02 * torch.randn(151936, 16, generator=g)
        emb[torch.tensor(used)] = state["model.embed_tokens.weight"]
        state["model.embed_tokens.weight"] = emb
        state["lm_head.weight"] = emb
        model.load_state_dict(state)
    model = model.to(torch.bfloat16)
    if BUNDLED.exists():
        shutil.rmtree(BUNDLED)
    model.save_pretrained(BUNDLED)

    # Held-out sentences: what transformers routes where, by word class.
    text, ids, classes = render(enc, toy_sentences(np.random.default_rng(1), 40))
    assert set(ids) <= set(used), "held-out tokens the training never saw"
    assert len(ids) <= config.max_position_embeddings
    logits, gen, router, greedy_gap, router_gap = reference(Qwen3MoeForCausalLM, BUNDLED, ids)
    topk = {layer: r["experts"] for layer, r in router.items()}
    prompt = ids[:12]
    _, gen12, _, _, _ = reference(Qwen3MoeForCausalLM, BUNDLED, prompt)
    check = {
        "prompt": prompt,
        "greedy": gen12,
        "seed": 0,
        "versions": VERSIONS,
    }
    (BUNDLED / "transformers_check.json").write_text(json.dumps(check, indent=1) + "\n")
    word_classes = {
        "about": "Held-out sentences of the toy grammar the bundled model was trained on; "
        "per token its word class, and transformers' router top-k per MoE layer.",
        "grammar": GRAMMAR,
        "training": {
            "sentences": 4000,
            "tokens": len(train_ids),
            "steps": steps,
            "batch": batch,
            "seq_len": seq,
            "optimizer": "AdamW lr 1e-2, no weight decay",
            "router_aux_loss_coef": 0.01,
            "first_loss": round(losses[0], 4),
            "last_50_mean_loss": round(float(np.mean(losses[-50:])), 4),
        },
        "text": text,
        "ids": ids,
        "classes": classes,
        "router_topk": topk,
        "class_table": class_table(topk, classes, config.num_experts),
        "versions": VERSIONS,
    }
    (BUNDLED / "word_classes.json").write_text(json.dumps(word_classes) + "\n")
    size = sum(f.stat().st_size for f in BUNDLED.iterdir())
    print(f"bundled: {size / 1e6:.2f} MB, loss {losses[0]:.3f} → {np.mean(losses[-50:]):.3f}, "
          f"greedy {gen12} = {enc.decode(gen12)!r}, router gap {router_gap:.1e}")
    for layer, rows in word_classes["class_table"].items():
        print(f"  layer {layer}")
        for cls, row in rows.items():
            print(f"    {cls:12s} {row}")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    only = sys.argv[1:]
    for name, (overrides, opts) in CASES.items():
        if only and name not in only:
            continue
        build_case(name, overrides, opts, OUT / name)
    if not only or "bundled" in only:
        build_bundled()
    (OUT / "versions.json").write_text(json.dumps(VERSIONS, indent=1) + "\n")


if __name__ == "__main__":
    main()
