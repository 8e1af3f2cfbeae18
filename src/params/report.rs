//! Chapter 6's output: what `anatomy params` prints (a text table, or the [`ParamReport`]
//! as JSON) and the tables the chapter includes from `book/src/generated/`.

use super::{BUNDLED, ModelConfig, ParamReport, bundled, count, layer_tensors};
use crate::error::Result;
use std::path::Path;

/// Reads a config.json and counts it (what `anatomy params` calls).
pub fn report_file(path: &Path) -> Result<ParamReport> {
    Ok(count(&ModelConfig::from_file(path)?))
}

/// Human-readable table of a report.
pub fn text_report(r: &ParamReport) -> String {
    let pct = |x: u64, of: u64| 100.0 * x as f64 / of as f64;
    let gb = |b: u64| b as f64 / 1e9;
    let mut s = String::new();
    let model_type = serde_json::to_value(r.model_type)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    s.push_str(&format!("model_type          {model_type}\n"));
    s.push_str(&format!(
        "layers              {} ({} dense, {} MoE)\n",
        r.dense_layers + r.moe_layers,
        r.dense_layers,
        r.moe_layers
    ));
    s.push_str(&format!(
        "{:<20}{:>18} {:>8} {:>18} {:>8}\n",
        "", "total", "share", "active", "share"
    ));
    let a = &r.active_split;
    for (name, t, act) in [
        ("embedding", r.embedding, a.embedding),
        ("attention", r.attention, a.attention),
        ("ffn / moe", r.ffn, a.ffn),
        ("norms", r.norms, a.norms),
    ] {
        s.push_str(&format!(
            "{:<20}{:>18} {:>7.2}% {:>18} {:>7.2}%\n",
            name,
            group(t),
            pct(t, r.total),
            group(act),
            pct(act, r.active)
        ));
    }
    s.push_str(&format!(
        "{:<20}{:>18} {:>8} {:>18}\n",
        "sum",
        group(r.total),
        "",
        group(r.active)
    ));
    let d = &r.ffn_detail;
    s.push_str(&format!(
        "ffn detail          dense {}, router {}, experts {}, shared {}\n",
        group(d.dense_mlp),
        group(d.router),
        group(d.experts),
        group(d.shared_experts)
    ));
    if r.mtp > 0 {
        s.push_str(&format!(
            "MTP module          {} (total with MTP {})\n",
            group(r.mtp),
            group(r.total_with_mtp)
        ));
    }
    if let (Some(ft), Some(fa)) = (r.text_formula_total, r.text_formula_active) {
        s.push_str(&format!(
            "text formula        total {} (exact − formula = {}), active {}\n",
            group(ft),
            group(r.total - ft),
            group(fa)
        ));
    }
    s.push_str(&format!(
        "weights             {:.2} GB bf16, {:.2} GB fp8, {:.2} GB f32\n",
        gb(r.bytes_bf16),
        gb(r.bytes_fp8),
        gb(r.bytes_f32)
    ));
    s.push_str(&format!(
        "KV cache / token    {} bytes bf16 (expanded {})\n",
        group(r.kv_cache_bytes_per_token_bf16),
        group(r.kv_cache_bytes_per_token_bf16_expanded)
    ));
    s.push_str(&format!(
        "FLOPs / token       {:.3} GFLOP + {} per context position\n",
        r.flops_per_token as f64 / 1e9,
        group(r.attention_flops_per_context_token)
    ));
    s
}

/// `30532122624` → `30,532,122,624`.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The tables chapter 6 includes from `book/src/generated/` (file name, contents).
pub fn book_snippets() -> Vec<(&'static str, String)> {
    let c = bundled("qwen3-30b-a3b").expect("bundled config");
    let mut tensors = String::from(
        "| tensor (in `model.layers.{0..47}.`) | shape [out, in] | copies | parameters per layer |\n|---|---|---|---|\n",
    );
    let mut per_layer = 0;
    for ti in layer_tensors(&c, 0) {
        let shape: Vec<String> = ti.shape.iter().map(|x| group(*x)).collect();
        tensors.push_str(&format!(
            "| `{}` | [{}] | {} | {} |\n",
            ti.name,
            shape.join(", "),
            ti.copies,
            group(ti.numel())
        ));
        per_layer += ti.numel();
    }
    let r = count(&c);
    tensors.push_str(&format!(
        "| **one layer** | | | **{}** |\n| `model.embed_tokens.weight`, `lm_head.weight` | [{}, {}] | 2 | {} |\n| `model.norm.weight` | [{}] | 1 | {} |\n| **model (48 layers)** | | | **{}** |\n",
        group(per_layer),
        group(c.vocab_size),
        group(c.hidden_size),
        group(r.embedding),
        group(c.hidden_size),
        group(c.hidden_size),
        group(r.total)
    ));

    let mut models = String::from(
        "| config | total | active | embedding | attention | FFN / MoE | norms | bf16 weights | KV cache per token (bf16) | GFLOP per token |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (name, _) in BUNDLED {
        let r = count(&bundled(name).expect("bundled config"));
        models.push_str(&format!(
            "| `{name}` | {} | {} | {} | {} | {} | {} | {:.1} GB | {} B | {:.2} |\n",
            group(r.total),
            group(r.active),
            group(r.embedding),
            group(r.attention),
            group(r.ffn),
            group(r.norms),
            r.bytes_bf16 as f64 / 1e9,
            group(r.kv_cache_bytes_per_token_bf16),
            r.flops_per_token as f64 / 1e9
        ));
    }

    let mut shares = String::from(
        "| part | Qwen3-30B-A3B, share of total | Qwen3-30B-A3B, share of active | Qwen3-32B, share of total |\n|---|---|---|---|\n",
    );
    let d = count(&bundled("qwen3-32b").expect("bundled config"));
    let p = |x: u64, of: u64| format!("{:.2}%", 100.0 * x as f64 / of as f64);
    let a = r.active_split;
    for (label, t, act, dense) in [
        (
            "embeddings (input + output)",
            r.embedding,
            a.embedding,
            d.embedding,
        ),
        ("attention", r.attention, a.attention, d.attention),
        ("MoE (router + experts) / FFN", r.ffn, a.ffn, d.ffn),
        ("RMSNorm weights", r.norms, a.norms, d.norms),
    ] {
        shares.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            p(t, r.total),
            p(act, r.active),
            p(dense, d.total)
        ));
    }
    vec![
        ("qwen3-tensors.md", tensors),
        ("params-models.md", models),
        ("qwen3-shares.md", shares),
    ]
}
