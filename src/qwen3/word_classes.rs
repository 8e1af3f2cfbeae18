//! Which experts each word class goes to (chapter 9's Figure 9.1).

use crate::error::Result;
use crate::qwen3::model::Model;
use crate::qwen3::open::bundled_dir;
use serde_json::Value;
use std::path::Path;

/// Where each word class goes: per MoE layer, per class, the share of the class's expert
/// slots (k per token) that each expert received, over the held-out sentences of the
/// bundled model's toy grammar (data/tiny-qwen3-moe/word_classes.json).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClassRouting {
    /// What text was routed.
    pub source: String,
    pub classes: Vec<String>,
    /// Tokens of each class.
    pub tokens: Vec<usize>,
    /// `(layer, share[class][expert])`.
    pub layers: Vec<(usize, Vec<Vec<f64>>)>,
    /// Fraction of (layer, position) pairs whose top-k set equals transformers'.
    pub agreement_with_transformers: f64,
}

/// Routes the held-out toy-grammar text through `model` (tokenised by `tok`, which must
/// give the generator's ids) and tallies the experts each word class was sent to.
pub fn word_class_routing(
    model: &Model,
    tok: &crate::tokenizer::Tokenizer,
) -> Result<ClassRouting> {
    let path = bundled_dir().join("word_classes.json");
    word_class_routing_file(model, tok, &path, "held-out toy-grammar text")
}

/// [`word_class_routing`] over the text, classes and transformers' top-k sets of a
/// `word_classes.json` written by a generator script; `source` names the text.
pub fn word_class_routing_file(
    model: &Model,
    tok: &crate::tokenizer::Tokenizer,
    path: &Path,
    source: &str,
) -> Result<ClassRouting> {
    let what = path.display().to_string();
    let doc = crate::error::read_json(path)?;
    let text = doc["text"]
        .as_str()
        .ok_or_else(|| crate::Error::field(&what, "text", "not a string"))?;
    let want: Option<Vec<u32>> = doc["ids"]
        .as_array()
        .and_then(|a| a.iter().map(|v| v.as_u64().map(|x| x as u32)).collect());
    let labels: Option<Vec<&str>> = doc["classes"]
        .as_array()
        .and_then(|a| a.iter().map(Value::as_str).collect());
    let (Some(want), Some(labels)) = (want, labels) else {
        return Err(crate::Error::field(
            &what,
            "ids/classes",
            "not lists of ids / names",
        ));
    };
    let ids = tok.encode(text)?;
    if ids != want || labels.len() != ids.len() {
        return Err(crate::Error::Invalid(format!(
            "{what}: the tokenizer does not reproduce the generator's ids"
        )));
    }
    let out = model.logits(&ids)?;
    let mut classes: Vec<String> = Vec::new();
    for l in &labels {
        if !classes.iter().any(|c| c == l) {
            classes.push(l.to_string());
        }
    }
    let class_of: Vec<usize> = labels
        .iter()
        .map(|l| classes.iter().position(|c| c == l).unwrap_or(0))
        .collect();
    let mut tokens = vec![0; classes.len()];
    for &c in &class_of {
        tokens[c] += 1;
    }
    let (mut same, mut total) = (0usize, 0usize);
    let mut layers = Vec::new();
    for lr in &out.routing {
        let mut counts = vec![vec![0.0f64; model.config.num_experts]; classes.len()];
        let reference = &doc["router_topk"][lr.layer.to_string()];
        for (p, r) in lr.routing.iter().enumerate() {
            for &e in &r.experts {
                counts[class_of[p]][e] += 1.0;
            }
            let mut ours = r.experts.clone();
            ours.sort_unstable();
            let mut theirs: Vec<usize> = reference[p]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_u64().map(|x| x as usize))
                        .collect()
                })
                .unwrap_or_default();
            theirs.sort_unstable();
            same += usize::from(ours == theirs);
            total += 1;
        }
        for row in &mut counts {
            let sum: f64 = row.iter().sum();
            row.iter_mut().for_each(|x| *x /= sum.max(1.0));
        }
        layers.push((lr.layer, counts));
    }
    Ok(ClassRouting {
        source: source.to_string(),
        classes,
        tokens,
        layers,
        agreement_with_transformers: same as f64 / total.max(1) as f64,
    })
}

/// The class table as text: one block per layer, one row per class, shares in percent.
pub fn class_text(r: &ClassRouting) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "which experts each word class goes to ({}; % of the class's expert slots; top-k sets equal transformers' at {:.1}% of positions):",
        r.source,
        100.0 * r.agreement_with_transformers
    );
    for (layer, shares) in &r.layers {
        let experts = shares.first().map_or(0, Vec::len);
        let _ = write!(s, "  layer {layer:<2} {:>16}", "class (tokens)");
        for e in 0..experts {
            let _ = write!(s, " {:>5}", format!("e{e}"));
        }
        s.push('\n');
        for ((class, row), n) in r.classes.iter().zip(shares).zip(&r.tokens) {
            let _ = write!(s, "           {:>16}", format!("{class} ({n})"));
            for x in row {
                if *x == 0.0 {
                    let _ = write!(s, " {:>5}", "·");
                } else {
                    let _ = write!(s, " {:>5.0}", 100.0 * x);
                }
            }
            s.push('\n');
        }
    }
    s
}
