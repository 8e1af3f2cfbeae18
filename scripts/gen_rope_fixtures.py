#!/usr/bin/env python3
"""Generate the RoPE oracle fixtures in tests/fixtures/rope/ from Hugging Face transformers.

Run:  /work/pyenv/bin/python scripts/gen_rope_fixtures.py
Made with transformers 5.24.0 and torch 2.15.0 (the versions are also written into every
fixture; the script refuses to run on anything else so the fixtures stay reproducible).

Every case builds a real transformers config object and calls transformers' own code:
  * scaled types: transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config,
    device="cpu", seq_len=...)
  * "default": the model's rotary embedding, `<Model>RotaryEmbedding.compute_default_rope_parameters`
No RoPE formula is written here. When seq_len is None the script also instantiates the
model's `<Model>RotaryEmbedding(config)` and asserts its `inv_freq` buffer and
`attention_scaling` equal the function's output, so the fixture is what a model really uses.

Fixture kinds (one JSON file per case):
  * "cli":          `inputs` are exactly the arguments of `anatomy rope` (head_dim, theta,
                    scaling object or null, max_position_embeddings, seq_len).
  * "model_config": `config_path` (relative to the repo root) is a whole config.json, read by
                    `RopeConfig::from_model_config`; `inputs` are the equivalent CLI arguments as
                    transformers standardised them (head dim it uses, its rope_parameters).
Outputs: `inv_freq` (transformers computes it in float32; stored exactly as those floats) and
`attention_factor`.

The LongRoPE short/long factors are synthetic (a Phi-3-like shape, 48 planes for d = 96), not
copied from a checkpoint.
"""

import copy
import importlib
import json
import pathlib

import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

EXPECTED_TRANSFORMERS = "5.24.0"
EXPECTED_TORCH = "2.15.0"

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "rope"
CONFIGS = OUT / "configs"

transformers.logging.set_verbosity_error()


def rotary_class(config):
    """The model's own rotary-embedding class, e.g. Qwen3RotaryEmbedding for a Qwen3Config."""
    model_type = config.model_type
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    prefix = type(config).__name__[: -len("Config")]
    return getattr(module, f"{prefix}RotaryEmbedding")


def transformers_head_dim(config):
    """The head dimension transformers' RoPE code reads (`head_dim`, else hidden/heads)."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def run_transformers(config, seq_len):
    """inv_freq, attention_factor and a description of the call, from transformers itself."""
    rope_type = config.rope_parameters["rope_type"]
    cls = rotary_class(config)
    if rope_type == "default":
        inv_freq, attention_factor = cls.compute_default_rope_parameters(config, device="cpu", seq_len=seq_len)
        call = f"{cls.__name__}.compute_default_rope_parameters({type(config).__name__}, device='cpu', seq_len={seq_len})"
    else:
        fn = ROPE_INIT_FUNCTIONS[rope_type]
        inv_freq, attention_factor = fn(config, device="cpu", seq_len=seq_len)
        call = f"ROPE_INIT_FUNCTIONS[{rope_type!r}] = {fn.__name__}({type(config).__name__}, device='cpu', seq_len={seq_len})"
    assert inv_freq.dtype == torch.float32, inv_freq.dtype
    if seq_len is None:
        # The model's rotary module must hold exactly the same buffer.
        module = cls(config=config)
        assert torch.equal(module.inv_freq, inv_freq), f"{cls.__name__}.inv_freq differs"
        assert float(module.attention_scaling) == float(attention_factor)
        call += f"; equal to {cls.__name__}(config).inv_freq / .attention_scaling"
    return [float(x) for x in inv_freq.tolist()], float(attention_factor), call


def json_clean(value):
    """rope_parameters as plain JSON (lists of floats, ints kept as ints)."""
    return json.loads(json.dumps(value))


def write_fixture(name, kind, description, inputs, config, seq_len, config_path=None):
    inv_freq, attention_factor, call = run_transformers(config, seq_len)
    fixture = {
        "name": name,
        "kind": kind,
        "description": description,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "generator": "scripts/gen_rope_fixtures.py",
        "transformers_call": call,
        "transformers_config_class": type(config).__name__,
        "transformers_rope_parameters": json_clean(config.rope_parameters),
        "inputs": {**inputs, "seq_len": seq_len},
        "inv_freq_dtype": "float32",
        "inv_freq": inv_freq,
        "attention_factor": attention_factor,
    }
    if config_path is not None:
        fixture["config_path"] = config_path
    # Sanity: the CLI inputs describe the same RoPE transformers used.
    assert len(inv_freq) == int(inputs["head_dim"] * config.rope_parameters.get("partial_rotary_factor", 1.0)) // 2 or (
        config.rope_parameters["rope_type"] == "proportional"
    ), name
    assert transformers_head_dim(config) == inputs["head_dim"], (name, transformers_head_dim(config))
    (OUT / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n")
    return fixture


def cli_case(name, description, make_config, *, head_dim, theta, scaling, max_position_embeddings, seq_len=None):
    """A case given as `anatomy rope` arguments; `make_config(rope_parameters)` builds the
    transformers config with the same values (the scaling object plus rope_theta)."""
    rope_parameters = copy.deepcopy(scaling) if scaling is not None else {}
    rope_parameters.setdefault("rope_theta", theta)
    config = make_config(rope_parameters)
    assert config.max_position_embeddings == max_position_embeddings, (name, config.max_position_embeddings)
    inputs = {
        "head_dim": head_dim,
        "theta": theta,
        "scaling": scaling,
        "max_position_embeddings": max_position_embeddings,
    }
    return write_fixture(name, "cli", description, inputs, config, seq_len)


def config_case(name, description, config_cls, path, seq_len=None):
    """A whole config.json (path relative to the repo root) loaded by transformers."""
    raw = json.loads((ROOT / path).read_text())
    config = config_cls.from_dict(raw)
    # Let transformers standardise the parameters (as its init functions do) before reading them.
    config.standardize_rope_params()
    params = json_clean(config.rope_parameters)
    inputs = {
        "head_dim": transformers_head_dim(config),
        "theta": params["rope_theta"],
        "scaling": params,
        "max_position_embeddings": config.max_position_embeddings,
    }
    return write_fixture(name, "model_config", description, inputs, config, seq_len, config_path=path)


def phi3_like_factors():
    """Synthetic LongRoPE factors with Phi-3-mini-128k's shape: 48 per set (head_dim 96),
    short ≈ 1 rising slightly, long growing from ≈ 1 to ≈ 60 toward the slow planes."""
    short = [round(1.0 + 0.18 * (i / 47) ** 3, 6) for i in range(48)]
    long = [round(1.0 + 59.0 * (i / 47) ** 2.2, 6) for i in range(48)]
    return short, long


def write_config(name, config_dict):
    path = CONFIGS / f"{name}.json"
    path.write_text(json.dumps(config_dict, indent=2) + "\n")
    return str(path.relative_to(ROOT))


def main():
    assert transformers.__version__ == EXPECTED_TRANSFORMERS, transformers.__version__
    assert torch.__version__.split("+")[0] == EXPECTED_TORCH, torch.__version__
    OUT.mkdir(parents=True, exist_ok=True)
    CONFIGS.mkdir(parents=True, exist_ok=True)
    for old in list(OUT.glob("*.json")) + list(CONFIGS.glob("*.json")):
        old.unlink()

    t = transformers
    llama = lambda d, mpe: (lambda rp: t.LlamaConfig(head_dim=d, hidden_size=32 * d, num_attention_heads=32,
                                                     max_position_embeddings=mpe, rope_parameters=rp))
    qwen3 = lambda d, mpe: (lambda rp: t.Qwen3Config(head_dim=d, max_position_embeddings=mpe, rope_parameters=rp))
    deepseek_v3 = lambda d, mpe: (lambda rp: t.DeepseekV3Config(qk_rope_head_dim=d, max_position_embeddings=mpe,
                                                                 rope_parameters=rp))
    deepseek_v2 = lambda d, mpe: (lambda rp: t.DeepseekV2Config(qk_rope_head_dim=d, max_position_embeddings=mpe,
                                                                 rope_parameters=rp))
    phi3 = lambda d, mpe, orig: (lambda rp: t.Phi3Config(hidden_size=32 * d, num_attention_heads=32,
                                                         max_position_embeddings=mpe,
                                                         original_max_position_embeddings=orig, rope_parameters=rp))

    # --- default -------------------------------------------------------------------------
    cli_case("default_d128_theta1e4", "Plain RoPE, Llama-2 style.", llama(128, 4096),
             head_dim=128, theta=1e4, scaling=None, max_position_embeddings=4096)
    cli_case("default_d128_theta1e6", "Plain RoPE, Qwen3's base.", qwen3(128, 40960),
             head_dim=128, theta=1e6, scaling=None, max_position_embeddings=40960)
    cli_case("default_partial_half", "Partial RoPE (Phi style): only half of d = 128 rotates.",
             lambda rp: t.PhiConfig(hidden_size=4096, num_attention_heads=32, max_position_embeddings=2048,
                                    rope_parameters=rp),
             head_dim=128, theta=1e4, scaling={"rope_type": "default", "partial_rotary_factor": 0.5},
             max_position_embeddings=2048)

    # --- linear (PI) ---------------------------------------------------------------------
    cli_case("linear_factor8", "Position interpolation ×8.", llama(128, 32768),
             head_dim=128, theta=1e4, scaling={"rope_type": "linear", "factor": 8.0}, max_position_embeddings=32768)

    # --- dynamic NTK -----------------------------------------------------------------------
    dyn = {"rope_type": "dynamic", "factor": 4.0}
    for seq_len, label in [(None, "init"), (2048, "short"), (8192, "2x"), (32768, "8x")]:
        cli_case(f"dynamic_factor4_{label}",
                 f"Dynamic NTK, factor 4, trained on 4096, current length {seq_len}.", llama(128, 4096),
                 head_dim=128, theta=1e4, scaling=dyn, max_position_embeddings=4096, seq_len=seq_len)

    # --- YaRN ------------------------------------------------------------------------------
    cli_case("yarn_qwen3", "Qwen3's recommended YaRN: ×4 from 32768, θ 1e6, d 128.", qwen3(128, 131072),
             head_dim=128, theta=1e6,
             scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
             max_position_embeddings=131072)
    cli_case("yarn_deepseek_v3",
             "DeepSeek-V3's YaRN; transformers sets DeepseekV3Config.head_dim = qk_rope_head_dim = 64.",
             deepseek_v3(64, 163840), head_dim=64, theta=1e4,
             scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                      "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
             max_position_embeddings=163840)
    cli_case("yarn_attention_factor", "YaRN with an explicit attention_factor.", qwen3(128, 131072),
             head_dim=128, theta=1e6,
             scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                      "attention_factor": 1.25},
             max_position_embeddings=131072)
    cli_case("yarn_truncate_false", "gpt-oss's YaRN: ×32 from 4096, θ 150000, d 64, truncate false.",
             lambda rp: t.GptOssConfig(head_dim=64, max_position_embeddings=131072, rope_parameters=rp),
             head_dim=64, theta=150000.0,
             scaling={"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                      "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
             max_position_embeddings=131072)
    cli_case("yarn_deepseek_v2_mscale0707", "DeepSeek-V2(-Lite)'s YaRN: mscale = mscale_all_dim = 0.707.",
             deepseek_v2(64, 163840), head_dim=64, theta=1e4,
             scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                      "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
             max_position_embeddings=163840)
    cli_case("yarn_mscale_ratio", "YaRN with mscale 0.707 over mscale_all_dim 1.0 (ratio ≠ 1).",
             deepseek_v2(64, 163840), head_dim=64, theta=1e4,
             scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                      "mscale": 0.707, "mscale_all_dim": 1.0},
             max_position_embeddings=163840)
    cli_case("yarn_mscale_only", "YaRN with mscale but no mscale_all_dim: transformers ignores mscale.",
             qwen3(128, 131072), head_dim=128, theta=1e6,
             scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                      "mscale": 0.707},
             max_position_embeddings=131072)
    cli_case("yarn_legacy_type_key", "YaRN given with the legacy \"type\" key.", qwen3(128, 131072),
             head_dim=128, theta=1e6,
             scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
             max_position_embeddings=131072)
    cli_case("yarn_factor_null", "YaRN with factor null: max_position_embeddings / original (= 40).",
             deepseek_v3(64, 163840), head_dim=64, theta=1e4,
             scaling={"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 4096},
             max_position_embeddings=163840)
    cli_case("yarn_original_default", "YaRN without original_max_position_embeddings: it defaults to "
             "max_position_embeddings.", qwen3(128, 32768), head_dim=128, theta=1e6,
             scaling={"rope_type": "yarn", "factor": 4.0}, max_position_embeddings=32768)
    cli_case("yarn_partial_rotary", "YaRN on a partial rotary dimension (d 128, half rotates).",
             qwen3(128, 131072), head_dim=128, theta=1e6,
             scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                      "partial_rotary_factor": 0.5},
             max_position_embeddings=131072)

    # --- llama3 ----------------------------------------------------------------------------
    cli_case("llama3_8x", "Llama 3.1: ×8, low 1, high 4, from 8192, θ 500000.", llama(128, 131072),
             head_dim=128, theta=500000.0,
             scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
             max_position_embeddings=131072)

    # --- LongRoPE --------------------------------------------------------------------------
    short, long = phi3_like_factors()
    longrope = {"rope_type": "longrope", "short_factor": short, "long_factor": long,
                "original_max_position_embeddings": 4096}
    for seq_len, label in [(None, "short_init"), (4096, "short_at_original"), (8192, "long")]:
        cli_case(f"longrope_phi3_{label}",
                 f"Phi-3-like LongRoPE (d 96, 4096 → 131072), sequence length {seq_len}.",
                 phi3(96, 131072, 4096), head_dim=96, theta=1e4, scaling=longrope,
                 max_position_embeddings=131072, seq_len=seq_len)
    cli_case("longrope_explicit_factor", "LongRoPE with explicit factor and attention_factor.",
             phi3(96, 131072, 4096), head_dim=96, theta=1e4,
             scaling={**longrope, "factor": 32.0, "attention_factor": 1.1}, max_position_embeddings=131072,
             seq_len=131072)

    # --- proportional ----------------------------------------------------------------------
    cli_case("proportional_quarter", "Proportional RoPE: a quarter of d = 256 rotates, ÷8.", llama(256, 8192),
             head_dim=256, theta=1e6,
             scaling={"rope_type": "proportional", "factor": 8.0, "partial_rotary_factor": 0.25},
             max_position_embeddings=8192)

    # --- whole config.json files -------------------------------------------------------------
    config_case("config_qwen3_30b_a3b", "Qwen3-30B-A3B config.json (4.x style, rope_scaling null).",
                t.Qwen3MoeConfig, "data/configs/qwen3-30b-a3b.json")
    config_case("config_deepseek_v3", "DeepSeek-V3 config.json (legacy \"type\": \"yarn\", qk_rope_head_dim).",
                t.DeepseekV3Config, "data/configs/deepseek-v3.json")
    config_case("config_mixtral_8x7b", "Mixtral-8x7B config.json (no head_dim: hidden/heads).",
                t.MixtralConfig, "data/configs/mixtral-8x7b.json")

    # transformers-5 serialisations (rope_parameters carrying rope_theta), written by transformers.
    qwen3_v5 = t.Qwen3Config(head_dim=128, hidden_size=2048, num_attention_heads=32, num_key_value_heads=4,
                             max_position_embeddings=131072,
                             rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 32768, "rope_theta": 1e6})
    path = write_config("qwen3-yarn-v5", json.loads(qwen3_v5.to_json_string()))
    config_case("config_qwen3_yarn_v5", "transformers-5 Qwen3 config with rope_parameters (YaRN ×4).",
                t.Qwen3Config, path)
    ds_v5 = t.DeepseekV3Config.from_dict(json.loads((ROOT / "data/configs/deepseek-v3.json").read_text()))
    path = write_config("deepseek-v3-v5", json.loads(ds_v5.to_json_string()))
    config_case("config_deepseek_v3_v5", "DeepSeek-V3 config re-saved by transformers 5 (rope_parameters).",
                t.DeepseekV3Config, path)

    # 4.x-style configs of other families.
    path = write_config("phi3-longrope", {
        "model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long},
    })
    for seq_len, label in [(None, "short"), (8192, "long")]:
        config_case(f"config_phi3_longrope_{label}",
                    "Phi-3-mini-128k-style config: original_max_position_embeddings at top level, "
                    f"rope_scaling without it; sequence length {seq_len}.", t.Phi3Config, path, seq_len)
    path = write_config("qwen3-both-rope-keys", {
        "model_type": "qwen3", "head_dim": 128, "hidden_size": 2048, "num_attention_heads": 32,
        "max_position_embeddings": 131072, "rope_theta": 1000000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    })
    config_case("config_rope_scaling_priority",
                "Both rope_scaling (YaRN) and rope_parameters (default): transformers takes rope_scaling.",
                t.Qwen3Config, path)
    path = write_config("llama3-toplevel-original", {
        "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
        "original_max_position_embeddings": 2048, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
    })
    config_case("config_llama3_toplevel_original",
                "Llama-3.1-style config whose top-level original_max_position_embeddings (2048) differs from "
                "the one in rope_scaling (8192): transformers' standardize_rope_params lets the top level win.",
                t.LlamaConfig, path)
    path = write_config("phi2-partial", {
        "model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32, "max_position_embeddings": 2048,
        "partial_rotary_factor": 0.4, "rope_theta": 10000.0, "rope_scaling": None,
    })
    config_case("config_phi2_partial", "Phi-2-style config: top-level partial_rotary_factor 0.4 of d 80.",
                t.PhiConfig, path)
    path = write_config("mixtral-no-theta", {
        "model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 32768,
    })
    config_case("config_mixtral_no_theta", "Mixtral config without rope_theta: MixtralConfig.default_theta = 1e6.",
                t.MixtralConfig, path)
    path = write_config("phi-partial-priority", {
        "model_type": "phi", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 2048,
        "partial_rotary_factor": 0.25,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    })
    config_case("config_phi_partial_priority",
                "partial_rotary_factor both at top level (0.25) and in rope_parameters (0.5): the latter wins.",
                t.PhiConfig, path)

    n = len(list(OUT.glob("*.json")))
    print(f"wrote {n} fixtures into {OUT.relative_to(ROOT)} "
          f"(transformers {transformers.__version__}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
