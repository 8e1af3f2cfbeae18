//! Claims of chapter 6: Qwen3-30B-A3B by the numbers (S0 5.5).

use super::{Entry, Outcome, Status, outcome};
use crate::kernels::rmsnorm;
use crate::params::{self, ParamReport, group};
use serde_json::Value;

fn a3b() -> (params::ModelConfig, ParamReport) {
    let c = params::bundled("qwen3-30b-a3b").expect("bundled config");
    let r = params::count(&c);
    (c, r)
}

fn pct(x: u64, of: u64) -> f64 {
    100.0 * x as f64 / of as f64
}

fn qwen3_wq_shape() -> Outcome {
    let (c, _) = a3b();
    let q_out = c.num_attention_heads * c.head_dim;
    outcome(
        q_out as f64,
        format!(
            "hidden_size {} ≠ {}·{} = {q_out}: W_Q maps {} → {q_out} (q_proj.weight is stored [{q_out}, {}])",
            c.hidden_size, c.num_attention_heads, c.head_dim, c.hidden_size, c.hidden_size
        ),
        q_out == 4096 && c.hidden_size == 2048,
        "Right in the x·W convention the text uses; the checkpoint's nn.Linear stores the transpose, [out, in] = [4096, 2048].",
    )
}

fn qwen3_router_params() -> Outcome {
    let (c, _) = a3b();
    let router = params::layer_params(&c, 0).ffn.router;
    outcome(
        router as f64,
        format!("router {} × {} = {}", c.hidden_size, 128, group(router)),
        router == 262_144,
        "One row of hidden_size weights per expert, no bias.",
    )
}

fn qwen3_expert_params() -> Outcome {
    let (c, _) = a3b();
    let m = c.moe.as_ref().expect("MoE config");
    let expert = params::mlp_params(c.hidden_size, m.expert_intermediate, false);
    outcome(
        expert as f64,
        format!(
            "3 × {} × {} = {}",
            c.hidden_size,
            m.expert_intermediate,
            group(expert)
        ),
        expert == 4_718_592,
        "gate_proj, up_proj [768, 2048] and down_proj [2048, 768], no biases.",
    )
}

fn qwen3_experts_per_layer() -> Outcome {
    let (c, _) = a3b();
    let experts = params::layer_params(&c, 0).ffn.experts;
    outcome(
        experts as f64,
        format!("128 × 4,718,592 = {}", group(experts)),
        (experts as f64 / 1e6).round() == 604.0,
        "603,979,776 ≈ 604M per layer.",
    )
}

fn qwen3_total_params() -> Outcome {
    let (_, r) = a3b();
    outcome(
        r.total as f64,
        format!(
            "{} exact (the text's formula: {})",
            group(r.total),
            group(r.text_formula_total.unwrap_or(0))
        ),
        (r.total as f64 / 1e8).round() == 305.0,
        "30,532,122,624 parameters as transformers builds the model (checked on the meta device); the formula misses only the 210,944 RMSNorm weights.",
    )
}

fn qwen3_active_params() -> Outcome {
    let (_, r) = a3b();
    outcome(
        r.active as f64,
        format!(
            "{} exact, {} by the text's formula; {} without the two embedding matrices",
            group(r.active),
            group(r.text_formula_active.unwrap_or(0)),
            group(r.active_non_embedding)
        ),
        (r.active as f64 / 1e7).round() == 335.0,
        "3.353B with both embedding matrices counted whole, as the text's formula does; 2.73B of it is the transformer layers.",
    )
}

/// (attention, MoE/FFN, embedding) shares in percent.
fn shares(r: &ParamReport, active: bool) -> [f64; 3] {
    let (split, of) = if active {
        (r.active_split, r.active)
    } else {
        (
            params::Split {
                embedding: r.embedding,
                attention: r.attention,
                ffn: r.ffn,
                norms: r.norms,
            },
            r.total,
        )
    };
    [
        pct(split.attention, of),
        pct(split.ffn, of),
        pct(split.embedding, of),
    ]
}

fn share_outcome(s: [f64; 3], stated: [f64; 3], names: [&str; 3], note: &str) -> Outcome {
    let ok = s.iter().zip(stated).all(|(a, b)| a.round() == b);
    outcome(
        s[0],
        format!(
            "{} {:.2}%, {} {:.2}%, {} {:.2}% (norms the rest)",
            names[0], s[0], names[1], s[1], names[2], s[2]
        ),
        ok,
        note,
    )
}

fn qwen3_share_total() -> Outcome {
    let (_, r) = a3b();
    share_outcome(
        shares(&r, false),
        [3.0, 95.0, 2.0],
        ["attention", "MoE", "embeddings"],
        "Each share rounds to the stated percentage.",
    )
}

fn qwen3_share_active() -> Outcome {
    let (_, r) = a3b();
    share_outcome(
        shares(&r, true),
        [27.0, 54.0, 19.0],
        ["attention", "MoE", "embeddings"],
        "Each share rounds to the stated percentage; 8 experts leave the embeddings a fifth of what a token touches.",
    )
}

fn qwen3_dense32b_share() -> Outcome {
    let c = params::bundled("qwen3-32b").expect("bundled config");
    let r = params::count(&c);
    let s = shares(&r, false);
    let ok = s[0].round() == 18.0 && s[1].round() == 77.0;
    outcome(
        s[0],
        format!(
            "attention {:.2}%, FFN {:.2}%, embeddings {:.2}% of {}",
            s[0],
            s[1],
            s[2],
            group(r.total)
        ),
        ok,
        "Both shares round to the stated values; the remaining 4.75% are the two embedding matrices.",
    )
}

fn qwen3_gqa() -> Outcome {
    let (c, _) = a3b();
    let d = params::bundled("qwen3-32b").expect("bundled config");
    let g1 = c.num_attention_heads / c.num_key_value_heads;
    let g2 = d.num_attention_heads / d.num_key_value_heads;
    outcome(
        g1 as f64,
        format!(
            "30B-A3B: {} / {} = {g1} query heads per KV head; 32B: {} / {} = {g2}",
            c.num_attention_heads,
            c.num_key_value_heads,
            d.num_attention_heads,
            d.num_key_value_heads
        ),
        (
            c.num_attention_heads,
            c.num_key_value_heads,
            d.num_attention_heads,
            d.num_key_value_heads,
        ) == (32, 4, 64, 8),
        "Both models share each KV head among 8 query heads.",
    )
}

fn qwen3_rmsnorm() -> Outcome {
    // The formula: y = x / sqrt(mean(x²) + ε) ⊙ γ, against an f64 evaluation.
    let x: Vec<f32> = (0..2048)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    let g: Vec<f32> = (0..2048).map(|i| 1.0 + (i % 13) as f32 / 26.0).collect();
    let mut y = vec![0.0f32; 2048];
    rmsnorm(&x, &g, 1e-6, &mut y);
    let ms: f64 = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 2048.0;
    let rms = (ms + 1e-6).sqrt();
    let worst = x
        .iter()
        .zip(&g)
        .zip(&y)
        .map(|((xi, gi), yi)| ((*xi as f64 / rms) * *gi as f64 - *yi as f64).abs())
        .fold(0.0f64, f64::max);
    let (c, r) = a3b();
    let per_layer = params::layer_params(&c, 0).norms;
    let hidden_norms = 2 * c.hidden_size;
    // RMSNorm modules per layer: the two around attention/FFN, plus q_norm and k_norm.
    let modules = 2 + if c.qk_norm == params::QkNorm::None {
        0
    } else {
        2
    };
    Outcome {
        value: Some(modules as f64),
        computed: format!(
            "formula matches f64 to {worst:.1e}; per layer {modules} RMSNorms: input + post-attention ({} weights) and q_norm + k_norm ({} weights); {} norm weights in all",
            group(hidden_norms),
            per_layer - hidden_norms,
            group(r.norms)
        ),
        status: if worst < 1e-5 && modules == 2 {
            Status::Reproduced
        } else {
            Status::Erratum
        },
        note: "The formula is right, but Qwen3 has four RMSNorms per layer, not two: q_norm and k_norm (head_dim = 128 weights each, shared across heads) normalise every query and key head before RoPE — new in Qwen3 compared with Qwen2.".into(),
    }
}

fn qwen3_param_formula_note() -> Outcome {
    let (c, r) = a3b();
    let formula = r.text_formula_total.expect("GQA model");
    let diff = r.total - formula;
    let per_layer = params::layer_params(&c, 0).norms;
    outcome(
        diff as f64,
        format!(
            "exact − formula = {} = 48 × {} + {} (final norm) = {:.5}% of the total; active: {}",
            group(diff),
            group(per_layer),
            c.hidden_size,
            pct(diff, r.total),
            group(r.active - r.text_formula_active.unwrap_or(0))
        ),
        diff == r.norms,
        "The simplified formula misses exactly the RMSNorm weights (2 × 2048 + 2 × 128 per layer, plus the final 2048): 210,944 parameters, 7·10⁻⁶ of the total — invisible at \"≈ 30.5B\".",
    )
}

fn qwen3_config_table() -> Outcome {
    // The text's table (5.5.1), row by row, against the published config.json files.
    let parse = |name: &str| -> Value {
        let text = params::BUNDLED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .expect("bundled config");
        serde_json::from_str(text).expect("valid JSON")
    };
    let (moe, dense) = (parse("qwen3-30b-a3b"), parse("qwen3-32b"));
    let rows: [(&str, f64, Option<f64>); 14] = [
        ("hidden_size", 2048.0, Some(5120.0)),
        ("num_hidden_layers", 48.0, Some(64.0)),
        ("num_attention_heads", 32.0, Some(64.0)),
        ("num_key_value_heads", 4.0, Some(8.0)),
        ("head_dim", 128.0, Some(128.0)),
        ("intermediate_size", 6144.0, Some(25600.0)),
        ("num_experts", 128.0, None),
        ("num_experts_per_tok", 8.0, None),
        ("moe_intermediate_size", 768.0, None),
        ("decoder_sparse_step", 1.0, None),
        ("norm_topk_prob", 1.0, None),
        ("router_aux_loss_coef", 0.001, None),
        ("rope_theta", 1e6, Some(1e6)),
        ("vocab_size", 151_936.0, Some(151_936.0)),
    ];
    let num = |v: &Value| v.as_f64().or_else(|| v.as_bool().map(|b| b as u8 as f64));
    let mut bad = Vec::new();
    for (field, m, d) in rows {
        if num(&moe[field]) != Some(m) {
            bad.push(format!("30B-A3B {field}"));
        }
        if let Some(d) = d
            && num(&dense[field]) != Some(d)
        {
            bad.push(format!("32B {field}"));
        }
    }
    let arch_ok = moe["architectures"][0] == "Qwen3MoeForCausalLM"
        && dense["architectures"][0] == "Qwen3ForCausalLM"
        && moe["mlp_only_layers"]
            .as_array()
            .is_some_and(|a| a.is_empty());
    outcome(
        bad.len() as f64,
        if bad.is_empty() {
            "all 14 rows (22 values), the architectures and mlp_only_layers = [] match the published config.json files".into()
        } else {
            format!("mismatches: {}", bad.join(", "))
        },
        bad.is_empty() && arch_ok,
        "The table is the two published configs, value for value.",
    )
}

/// A [`params::ParamTensor`] name with an expert range (`mlp.experts.{0..7}.up_proj.weight`)
/// expanded into one name per expert.
fn expand(name: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (name.find('{'), name.find('}')) else {
        return vec![name.to_string()];
    };
    let range = &name[open + 1..close];
    let Some((lo, hi)) = range.split_once("..") else {
        return vec![name.to_string()];
    };
    let (Ok(lo), Ok(hi)) = (lo.parse::<u64>(), hi.parse::<u64>()) else {
        return vec![name.to_string()];
    };
    (lo..=hi)
        .map(|e| format!("{}{e}{}", &name[..open], &name[close + 1..]))
        .collect()
}

/// params' tensor list for a config against the tensors a real checkpoint holds: the
/// number of layer tensors that agree in name and shape, and the disagreements.
fn tensors_against_checkpoint(
    c: &params::ModelConfig,
    ckpt: &crate::checkpoint::Checkpoint,
) -> (usize, Vec<String>) {
    let mut listed = std::collections::BTreeSet::new();
    let (mut same, mut bad) = (0usize, Vec::new());
    for l in 0..c.num_hidden_layers {
        for t in params::layer_tensors(c, l) {
            for name in expand(&t.name) {
                let full = format!("model.layers.{l}.{name}");
                let want: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
                match ckpt.info(&full) {
                    Ok(info) if info.shape == want => same += 1,
                    Ok(info) => bad.push(format!("{full}: {:?} ≠ {want:?}", info.shape)),
                    Err(_) => bad.push(format!("{full}: missing")),
                }
                listed.insert(full);
            }
        }
    }
    for n in ckpt.names() {
        if n.starts_with("model.layers.") && !listed.contains(n) {
            bad.push(format!("{n}: not in the list"));
        }
    }
    (same, bad)
}

/// S0 5.5.2: W_K, W_V 2048 × 512 and W_O 4096 × 2048.
fn qwen3_attention_shapes() -> Outcome {
    let (c, _) = a3b();
    let layer = params::layer_tensors(&c, 0);
    // The text writes x·W ([in, out]); a checkpoint stores nn.Linear weights [out, in].
    let as_text = |name: &str| {
        layer
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.shape.iter().rev().copied().collect::<Vec<u64>>())
            .unwrap_or_default()
    };
    let (q, k, v, o) = (
        as_text("self_attn.q_proj.weight"),
        as_text("self_attn.k_proj.weight"),
        as_text("self_attn.v_proj.weight"),
        as_text("self_attn.o_proj.weight"),
    );
    let text_ok = q == [2048, 4096] && k == [2048, 512] && v == [2048, 512] && o == [4096, 2048];
    // The list's layout against a real checkpoint: the bundled tiny model, written by
    // transformers' save_pretrained.
    let check = || -> crate::Result<(usize, Vec<String>)> {
        let dir = crate::qwen3::bundled_dir();
        let ckpt = crate::checkpoint::Checkpoint::open(&dir)?;
        let cfg = crate::error::read_json(&dir.join("config.json"))?;
        let tiny = params::ModelConfig::from_json(&cfg, "data/tiny-qwen3-moe/config.json")?;
        Ok(tensors_against_checkpoint(&tiny, &ckpt))
    };
    let (same, bad) = check().unwrap_or_else(|e| (0, vec![e.to_string()]));
    let fmt = |s: &[u64]| format!("{} × {}", s.first().unwrap_or(&0), s.last().unwrap_or(&0));
    let stored = |s: &[u64]| {
        s.iter()
            .rev()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    outcome(
        k.last().copied().unwrap_or(0) as f64,
        format!(
            "Qwen3-30B-A3B (x·W): W_Q {}, W_K {}, W_V {}, W_O {}; stored [out, in]: k_proj/v_proj [{}], o_proj [{}]; the same list for the bundled checkpoint: {same} layer tensors agree in name and shape, {} do not{}",
            fmt(&q),
            fmt(&k),
            fmt(&v),
            fmt(&o),
            stored(&k),
            stored(&o),
            bad.len(),
            if bad.is_empty() {
                String::new()
            } else {
                format!(" ({})", bad.join("; "))
            }
        ),
        text_ok && same > 0 && bad.is_empty(),
        "Reproduced in the text's x·W convention: 4 KV heads × 128 = 512 columns for W_K and W_V, 32 × 128 = 4096 rows into W_O; a checkpoint stores the transposes ([512, 2048] and [2048, 4096]), as the tensor list does — which matches the bundled transformers-written checkpoint tensor for tensor.",
    )
}

pub const ENTRIES: &[Entry] = &[
    Entry {
        id: "qwen3.config_table",
        section: "S0 5.5.1",
        statement: "the architecture table: Qwen3-30B-A3B vs Qwen3-32B config values",
        stated: "14 rows",
        compute: qwen3_config_table,
    },
    Entry {
        id: "qwen3.wq_shape",
        section: "S0 5.5.1",
        statement: "W_Q is [2048, 32·128 = 4096]; hidden_size ≠ heads·head_dim",
        stated: "[2048, 4096]",
        compute: qwen3_wq_shape,
    },
    Entry {
        id: "qwen3.router_params",
        section: "S0 5.5.2",
        statement: "router 2048 × 128",
        stated: "262,144",
        compute: qwen3_router_params,
    },
    Entry {
        id: "qwen3.expert_params",
        section: "S0 5.5.2",
        statement: "one SwiGLU expert 3 × 2048 × 768",
        stated: "4,718,592",
        compute: qwen3_expert_params,
    },
    Entry {
        id: "qwen3.experts_per_layer",
        section: "S0 5.5.2",
        statement: "128 experts",
        stated: "≈ 604M",
        compute: qwen3_experts_per_layer,
    },
    Entry {
        id: "qwen3.total_params",
        section: "S0 5.5.2",
        statement: "embeddings (untied) + 48 × (attention + router + 128 experts)",
        stated: "≈ 30.5B",
        compute: qwen3_total_params,
    },
    Entry {
        id: "qwen3.active_params",
        section: "S0 5.5.2",
        statement: "same with 8 experts",
        stated: "≈ 3.35B",
        compute: qwen3_active_params,
    },
    Entry {
        id: "qwen3.share_total",
        section: "S0 5.5.3",
        statement: "attention ≈ 3%, MoE ≈ 95%, embeddings ≈ 2% of total",
        stated: "3 / 95 / 2 %",
        compute: qwen3_share_total,
    },
    Entry {
        id: "qwen3.share_active",
        section: "S0 5.5.3",
        statement: "attention ≈ 27%, MoE ≈ 54%, embeddings ≈ 19% of active",
        stated: "27 / 54 / 19 %",
        compute: qwen3_share_active,
    },
    Entry {
        id: "qwen3.dense32b_share",
        section: "S0 5.5.3",
        statement: "Qwen3-32B: attention ≈ 18%, FFN ≈ 77%",
        stated: "18 / 77 %",
        compute: qwen3_dense32b_share,
    },
    Entry {
        id: "qwen3.gqa",
        section: "S0 5.5.1",
        statement: "32 query heads share 4 KV heads (8 per group); 32B: 64 / 8",
        stated: "ratios",
        compute: qwen3_gqa,
    },
    Entry {
        id: "qwen3.rmsnorm",
        section: "S0 5.5.4",
        statement: "RMSNorm formula; 2 per layer + 1 final",
        stated: "formula",
        compute: qwen3_rmsnorm,
    },
    Entry {
        id: "qwen3.param_formula_note",
        section: "S0 5.5.2",
        statement: "the text's formula omits q_norm/k_norm and RMSNorm weights: how much does the exact count differ?",
        stated: "compute",
        compute: qwen3_param_formula_note,
    },
    Entry {
        id: "qwen3.attention_shapes",
        section: "S0 5.5.2",
        statement: "W_K, W_V 2048 × 512 and W_O 4096 × 2048 (checked against the checkpoint's tensor shapes)",
        stated: "shapes",
        compute: qwen3_attention_shapes,
    },
];
