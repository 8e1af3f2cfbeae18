#!/usr/bin/env python3
"""Fixtures for chapter 9's Qwen2 / Qwen2.5 support: tiny random `Qwen2ForCausalLM`
checkpoints written by transformers' own `save_pretrained`, with what transformers computes
on them — the logits of a fixed prompt and the greedy continuation (with the KV cache).

Run:  /work/peers/py/bin/python scripts/gen_qwen2_fixtures.py [case ...]
Uses: torch 2.15, transformers 5.24, safetensors, numpy (versions written into each case),
and the helpers of scripts/gen_qwen3_fixtures.py (weight randomisation, the reference run).

Each case is a directory tests/fixtures/qwen2/<case>/ holding
  config.json            as save_pretrained wrote it (transformers 5.x style: rope_parameters,
                         layer_types, dtype, `sliding_window: null` unless enabled)
  config_4x.json         the same model as transformers 4.x and the Qwen2 / Qwen2.5 releases
                         write it (rope_theta + rope_scaling, torch_dtype, no layer_types,
                         sliding_window a number even when use_sliding_window is false);
                         checked here to load in transformers to bit-identical logits
  model.safetensors      or model-0000i-of-0000n.safetensors + model.safetensors.index.json
  expected.safetensors   "logits" F32 [seq, vocab] (case qwen_vocab: the last row only,
                         [1, vocab], since its vocabulary is Qwen's 151,936 ids)
  expected.json          prompt ids, greedy continuation, the margins, versions, and what
                         the case checks (each feature is verified to move the logits)

Qwen2 differs from Qwen3 in the attention block: q/k/v always carry biases (o_proj none)
and there is no q_norm / k_norm. For every case the generator checks that zeroing the
biases changes the logits by more than 1e-2, and for the sliding-window case that full
attention would change them too, so a reader that skipped either would fail the 1e-5 test.

tests/fixtures/qwen2/configs/ holds the published config.json of Qwen2.5-0.5B-Instruct
(4.x style) and the same config re-saved by transformers 5.24 (5.x style).
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import Qwen2Config, Qwen2ForCausalLM

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gen_qwen3_fixtures as q3  # noqa: E402  (randomise, reference, VERSIONS)

OUT = ROOT / "tests" / "fixtures" / "qwen2"
MIN_DISTINCT = 4  # distinct tokens in the 8-token greedy continuation

BASE = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # head_dim = 32 / 4 = 8 (Qwen2's default), GQA 2 query heads per KV head
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    initializer_range=0.25,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
)

# name: (config overrides, options)
CASES = {
    "tied": (
        dict(tie_word_embeddings=True),
        dict(
            legacy_sliding_window=4,
            note="tie_word_embeddings (Qwen2.5-0.5B's layout); config_4x.json carries "
            "sliding_window 4 with use_sliding_window false, which must not apply",
        ),
    ),
    "untied_bf16_sharded": (
        dict(tie_word_embeddings=False, num_hidden_layers=3),
        dict(dtype=torch.bfloat16, max_shard_size="20KB",
             note="separate lm_head, bf16 weights in several shards with an index"),
    ),
    "sliding": (
        dict(num_hidden_layers=3, use_sliding_window=True, sliding_window=4, max_window_layers=1),
        dict(note="use_sliding_window with a window of 4 from layer max_window_layers = 1 on, "
             "prompt of 12"),
    ),
    "yarn_head_dim": (
        dict(
            hidden_size=24,
            head_dim=8,  # 4 heads × 8 = 32 ≠ hidden 24
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
        dict(prompt_len=40, legacy_type_key=True,
             note="YaRN factor 4 over 16 positions (config_4x.json writes it as the Qwen2.5 "
             "model cards do, with the legacy \"type\" key); head_dim 8 given explicitly"),
    ),
    "qwen_vocab": (
        dict(
            vocab_size=151936,
            hidden_size=8,
            intermediate_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=1024,
            tie_word_embeddings=True,
            bos_token_id=151643,
            eos_token_id=151645,
        ),
        dict(dtype=torch.bfloat16, last_row_only=True,
             note="Qwen's vocabulary size (so the Qwen tokenizer's ids are valid: generate "
             "--prompt, glitch --model, lost-in-middle), tied, bf16, hidden 8"),
    ),
}


def to_4x(cfg5, opts):
    """A transformers-5 config.json rewritten as transformers 4.x and the Qwen2 / Qwen2.5
    releases write it."""
    c = dict(cfg5)
    rp = dict(c.pop("rope_parameters"))
    c["rope_theta"] = rp.pop("rope_theta")
    kind = rp.pop("rope_type", "default")
    if kind == "default":
        c["rope_scaling"] = None
    else:
        key = "type" if opts.get("legacy_type_key") else "rope_type"
        c["rope_scaling"] = {key: kind, **rp}
    c["torch_dtype"] = c.pop("dtype")
    c.pop("layer_types", None)  # 4.x derives them from use_sliding_window / max_window_layers
    if c.get("sliding_window") is None:
        # The releases write a number here even with the window off (32768 or 131072).
        c["sliding_window"] = opts.get("legacy_sliding_window", 32768)
    c["transformers_version"] = "4.43.1"
    return c


def logits_of(directory, prompt, mutate=None):
    model = Qwen2ForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    if mutate:
        mutate(model)
    with torch.no_grad():
        return model(torch.tensor([prompt])).logits[0].float()


def zero_biases(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()


def full_attention(model):
    model.config.layer_types = ["full_attention"] * model.config.num_hidden_layers
    model.model.has_sliding_layers = False
    for layer in model.model.layers:
        layer.self_attn.sliding_window = None


def build_case(name, overrides, opts, out_dir):
    kw = dict(BASE)
    kw.update(overrides)
    config = Qwen2Config(**kw)
    prompt_len = opts.get("prompt_len", 12)
    base_seed = 2000 + sorted(CASES).index(name) * 100
    dtype = opts.get("dtype", torch.float32)
    for attempt in range(50):
        seed = base_seed + attempt
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
        q3.randomise(model, seed, config.initializer_range)
        model = model.to(dtype)
        rng = np.random.default_rng(seed)
        hi = min(config.vocab_size, 151643)  # ordinary (non-special) ids
        prompt = [int(x) for x in rng.integers(0, hi, prompt_len)]
        if out_dir.exists():
            shutil.rmtree(out_dir)
        save_kw = {}
        if "max_shard_size" in opts:
            save_kw["max_shard_size"] = opts["max_shard_size"]
        model.save_pretrained(out_dir, **save_kw)
        logits, gen, _, greedy_gap, _ = q3.reference(Qwen2ForCausalLM, out_dir, prompt)
        # A continuation that is one token over and over would hardly test the KV cache.
        if greedy_gap >= q3.MIN_GREEDY_GAP and len(set(gen)) >= MIN_DISTINCT:
            break
        print(f"  {name}: seed {seed} greedy margin {greedy_gap:.2e}, {len(set(gen))} distinct, next seed")
    else:
        sys.exit(f"{name}: no seed with a wide enough greedy margin")

    # Every feature the case tests moves the logits well past the test's tolerance.
    checks = {}
    d = float((logits_of(out_dir, prompt, zero_biases) - logits).abs().max())
    assert d > 1e-2, f"{name}: q/k/v biases barely matter ({d})"
    checks["max_change_without_qkv_biases"] = d
    if kw.get("use_sliding_window"):
        d = float((logits_of(out_dir, prompt, full_attention) - logits).abs().max())
        assert d > 1e-2, f"{name}: the sliding window barely matters ({d})"
        checks["max_change_with_full_attention"] = d

    # The same model under a 4.x-style config must load to the same logits.
    cfg5 = json.loads((out_dir / "config.json").read_text())
    cfg4 = to_4x(cfg5, opts)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for f in out_dir.iterdir():
            if f.name != "config.json":
                shutil.copy(f, tmp / f.name)
        (tmp / "config.json").write_text(json.dumps(cfg4, indent=2))
        logits4 = logits_of(tmp, prompt)
        assert torch.equal(logits4, logits), f"{name}: 4.x config changes the logits"
    (out_dir / "config_4x.json").write_text(json.dumps(cfg4, indent=2) + "\n")

    stored = logits[-1:] if opts.get("last_row_only") else logits
    save_file({"logits": stored.contiguous()}, out_dir / "expected.safetensors")
    expected = {
        "case": name,
        "note": opts.get("note", ""),
        "model_class": "Qwen2ForCausalLM",
        "seed": seed,
        "prompt": prompt,
        "greedy": gen,
        "logits_rows": "last" if opts.get("last_row_only") else "all",
        "min_greedy_gap": greedy_gap,
        "checks": checks,
        "versions": q3.VERSIONS,
    }
    if name == "qwen_vocab":
        # The glitch screen's first list: the rows of smallest L2 norm (numpy, from the
        # stored bf16 weights widened to f32).
        emb = load_embedding(out_dir)
        norms = np.linalg.norm(emb.astype(np.float64), axis=1)
        order = np.argsort(norms, kind="stable")[:10]
        expected["smallest_norm_ids"] = [int(i) for i in order]
        expected["smallest_norms"] = [float(norms[i]) for i in order]
    (out_dir / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    size = sum(f.stat().st_size for f in out_dir.iterdir())
    print(f"{name}: seed {seed}, {size / 1024:.0f} KiB, greedy {gen}, gap {greedy_gap:.2e}, {checks}")


def load_embedding(directory):
    from safetensors.torch import load_file

    t = load_file(directory / "model.safetensors")["model.embed_tokens.weight"]
    return t.float().numpy()


# Qwen/Qwen2.5-0.5B-Instruct's config.json as published
# (https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json).
QWEN25_05B_INSTRUCT = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 21,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def build_configs():
    """The published 0.5B-Instruct config, and the same config as transformers 5 saves it."""
    out = OUT / "configs"
    out.mkdir(parents=True, exist_ok=True)
    (out / "qwen2.5-0.5b-instruct.json").write_text(json.dumps(QWEN25_05B_INSTRUCT, indent=2) + "\n")
    cfg = Qwen2Config.from_dict(dict(QWEN25_05B_INSTRUCT))
    with tempfile.TemporaryDirectory() as tmp:
        cfg.save_pretrained(tmp)
        saved = json.loads((Path(tmp) / "config.json").read_text())
    (out / "qwen2.5-0.5b-instruct.5x.json").write_text(json.dumps(saved, indent=2) + "\n")
    print(f"configs: head_dim {cfg.hidden_size // cfg.num_attention_heads}, layer_types {set(cfg.layer_types)}")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    only = sys.argv[1:]
    for name, (overrides, opts) in CASES.items():
        if only and name not in only:
            continue
        build_case(name, overrides, opts, OUT / name)
    if not only or "configs" in only:
        build_configs()
    (OUT / "versions.json").write_text(json.dumps(q3.VERSIONS, indent=1) + "\n")


if __name__ == "__main__":
    main()
