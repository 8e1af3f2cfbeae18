//! Chapter 6's output: what `anatomy params` prints (a text table, or the [`ParamReport`]
//! as JSON), the three answers S1's closing synthesis ("三者合观") asks of any architecture
//! report ([`Architecture`]: position encoding and base, context extension, dense or MoE),
//! and the tables the book includes from `book/src/generated/`.

use super::{BUNDLED, Family, ModelConfig, ParamReport, bundled, count, layer_tensors};
use crate::error::{Result, read_json};
use crate::long_context::scaling::{RopeConfig, RopeScaling};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// Reads a config.json and counts it (what `anatomy params` calls).
pub fn report_file(path: &Path) -> Result<ParamReport> {
    Ok(count(&ModelConfig::from_file(path)?))
}

/// S1's first question: how positions enter the model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PositionAnswer {
    /// Every family this crate reads rotates queries and keys: `"rope"`.
    pub encoding: &'static str,
    /// The RoPE base (`rope_theta`, in either config style, or the family's default).
    pub rope_theta: f64,
    /// Dimensions of a query/key head that rotate…
    pub rotary_dims: u64,
    /// …out of the head's query/key width (MLA: `qk_nope_head_dim + qk_rope_head_dim`).
    pub qk_head_dim: u64,
}

/// S1's second question: how the context was stretched beyond pre-training.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContextAnswer {
    /// `max_position_embeddings`, the context the config declares.
    pub max_position_embeddings: Option<u64>,
    /// `"none"`, `"linear"` (PI), `"dynamic"` (NTK), `"yarn"`, `"llama3"`, `"longrope"`,
    /// `"proportional"`: the `rope_scaling` / `rope_parameters` type.
    pub extension: &'static str,
    pub factor: Option<f64>,
    pub original_max_position_embeddings: Option<u64>,
    /// The attention window when sliding-window attention is switched on.
    pub sliding_window: Option<u64>,
}

/// S1's third question: dense or MoE, and how sparse.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FfnAnswer {
    /// `"dense"` or `"moe"`.
    pub kind: &'static str,
    /// Routed experts a token uses (`k`) out of the routed experts of a layer (`N`).
    pub experts_per_token: u64,
    pub routed_experts: u64,
    /// Always-on shared experts (DeepSeek).
    pub shared_experts: u64,
    pub moe_layers: u64,
    pub dense_layers: u64,
}

/// The three answers, and each as one line of text.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Architecture {
    pub position: PositionAnswer,
    pub context: ContextAnswer,
    pub ffn: FfnAnswer,
    /// The three answers as `anatomy params` prints them.
    pub answers: [String; 3],
}

// ANCHOR: architecture
/// Reads the three answers from a config.json: the RoPE settings as chapter 3 reads them
/// ([`RopeConfig::from_model_config`]), the MoE settings as [`ModelConfig`] reads them.
pub fn architecture(v: &Value, what: &str) -> Result<Architecture> {
    let c = ModelConfig::from_json(v, what)?;
    let rope = RopeConfig::from_model_config(v, what)?;
    let qk_head_dim = match c.mla {
        Some(m) => m.qk_nope_head_dim + m.qk_rope_head_dim,
        None => c.head_dim,
    };
    let position = PositionAnswer {
        encoding: "rope",
        rope_theta: rope.theta,
        rotary_dims: rope.rotary_dim() as u64,
        qk_head_dim,
    };
    let (extension, factor, original) = match &rope.scaling {
        RopeScaling::Default => ("none", None, None),
        RopeScaling::Linear { factor } => ("linear", Some(*factor), None),
        RopeScaling::Dynamic { factor } => ("dynamic", Some(*factor), None),
        RopeScaling::Yarn(y) => (
            "yarn",
            Some(y.factor),
            Some(y.original_max_position_embeddings as u64),
        ),
        RopeScaling::Llama3(l) => (
            "llama3",
            Some(l.factor),
            Some(l.original_max_position_embeddings as u64),
        ),
        RopeScaling::LongRope(l) => (
            "longrope",
            Some(l.factor),
            Some(l.original_max_position_embeddings as u64),
        ),
        RopeScaling::Proportional { factor } => ("proportional", Some(*factor), None),
    };
    // ANCHOR_END: architecture
    // Qwen2/Qwen3 configs carry a `sliding_window` that is off unless `use_sliding_window`
    // (default false); Mistral-style configs switch it on by giving it a value.
    let window = v.get("sliding_window").and_then(Value::as_u64);
    let qwen = matches!(c.family, Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe);
    let sliding_window = match v.get("use_sliding_window").and_then(Value::as_bool) {
        Some(on) => window.filter(|_| on),
        None if qwen => None,
        None => window,
    };
    let context = ContextAnswer {
        max_position_embeddings: rope.max_position_embeddings.map(|n| n as u64),
        extension,
        factor,
        original_max_position_embeddings: original,
        sliding_window,
    };
    let r = count(&c);
    let ffn = match &c.moe {
        Some(m) => FfnAnswer {
            kind: "moe",
            experts_per_token: m.k,
            routed_experts: m.num_experts,
            shared_experts: m.n_shared_experts,
            moe_layers: r.moe_layers,
            dense_layers: r.dense_layers,
        },
        None => FfnAnswer {
            kind: "dense",
            experts_per_token: 0,
            routed_experts: 0,
            shared_experts: 0,
            moe_layers: 0,
            dense_layers: r.dense_layers,
        },
    };
    let answers = [
        position_line(&position),
        context_line(&context),
        ffn_line(&ffn),
    ];
    Ok(Architecture {
        position,
        context,
        ffn,
        answers,
    })
}

fn position_line(p: &PositionAnswer) -> String {
    let dims = if p.rotary_dims == p.qk_head_dim {
        format!("all {} dims of a query/key head rotate", p.qk_head_dim)
    } else {
        format!(
            "partial: {} of {} query/key dims rotate",
            p.rotary_dims, p.qk_head_dim
        )
    };
    format!("RoPE, base {}, {dims}", number(p.rope_theta))
}

fn context_line(c: &ContextAnswer) -> String {
    let max = match c.max_position_embeddings {
        Some(n) => format!("max_position_embeddings {}", group(n)),
        None => "no max_position_embeddings".into(),
    };
    let method = match (c.extension, c.factor, c.original_max_position_embeddings) {
        ("none", _, _) => "no RoPE scaling".to_string(),
        (kind, Some(f), Some(orig)) => {
            format!("{} ×{} from {}", method_name(kind), number(f), group(orig))
        }
        (kind, Some(f), None) => format!("{} ×{}", method_name(kind), number(f)),
        (kind, None, _) => method_name(kind).to_string(),
    };
    let mut s = format!("{method}; {max}");
    if let Some(w) = c.sliding_window {
        s.push_str(&format!(
            "; sliding-window attention of {} tokens",
            group(w)
        ));
    }
    s
}

fn method_name(kind: &str) -> &str {
    match kind {
        "linear" => "position interpolation (linear)",
        "dynamic" => "dynamic NTK",
        "yarn" => "YaRN",
        "llama3" => "llama3",
        "longrope" => "LongRoPE",
        other => other,
    }
}

fn ffn_line(f: &FfnAnswer) -> String {
    let layers = f.moe_layers + f.dense_layers;
    if f.kind == "dense" {
        return format!("dense: one FFN per layer, every parameter active ({layers} layers)");
    }
    let shared = if f.shared_experts > 0 {
        format!(" + {} shared", f.shared_experts)
    } else {
        String::new()
    };
    let dense = if f.dense_layers > 0 {
        format!(", {} dense", f.dense_layers)
    } else {
        String::new()
    };
    format!(
        "MoE: k/N = {}/{} routed experts per token{shared}, in {} of {layers} layers{dense}",
        f.experts_per_token, f.routed_experts, f.moe_layers
    )
}

/// `1000000.0` → `1,000,000`; `0.5` → `0.5`.
fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        let s = group(x.abs() as u64);
        if x < 0.0 { format!("-{s}") } else { s }
    } else {
        format!("{x}")
    }
}

/// What `anatomy params` prints: the counts (as [`text_report`] and the [`ParamReport`]
/// JSON have always had them) and, as a new block / the key `"architecture"`, the three
/// answers.
#[derive(Clone, Debug, Serialize)]
pub struct ConfigReport {
    #[serde(flatten)]
    pub params: ParamReport,
    pub architecture: Architecture,
}

/// Reads a config.json, counts it and answers the three questions.
pub fn config_report_file(path: &Path) -> Result<ConfigReport> {
    let v = read_json(path)?;
    config_report_json(&v, &path.display().to_string())
}

/// [`config_report_file`] of a config already parsed (also the config.json the engine
/// writes for a GGUF file's metadata); `what` names it in errors.
pub fn config_report_json(v: &Value, what: &str) -> Result<ConfigReport> {
    let what = what.to_string();
    let c = ModelConfig::from_json(v, &what)?;
    Ok(ConfigReport {
        params: count(&c),
        architecture: architecture(v, &what)?,
    })
}

/// [`text_report`], then the three answers as a block of their own.
pub fn config_text_report(r: &ConfigReport) -> String {
    let mut s = text_report(&r.params);
    s.push_str("three questions (S1 三者合观)\n");
    for (label, answer) in ["position encoding", "context extension", "dense or MoE"]
        .iter()
        .zip(&r.architecture.answers)
    {
        s.push_str(&format!("  {label:<18}{answer}\n"));
    }
    s
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
    let mut questions = String::from(
        "| config | position encoding | context extension | dense or MoE |\n|---|---|---|---|\n",
    );
    for (name, text) in BUNDLED {
        let v: Value = serde_json::from_str(text).expect("bundled config is JSON");
        let a = architecture(&v, name).expect("bundled config answers");
        questions.push_str(&format!(
            "| `{name}` | {} | {} | {} |\n",
            a.answers[0], a.answers[1], a.answers[2]
        ));
    }
    vec![
        ("three-questions.md", questions),
        ("qwen3-tensors.md", tensors),
        ("params-models.md", models),
        ("qwen3-shares.md", shares),
    ]
}
