//! `anatomy router-stats`: the routing of a forward call as a report and a table.

use crate::qwen3::config::Qwen3Config;
use crate::qwen3::model::Output;

/// One position's routing in one MoE layer, for reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PositionRouting {
    pub position: usize,
    pub token: u32,
    pub experts: Vec<usize>,
    pub weights: Vec<f32>,
}

/// One MoE layer's routing over a prompt, and how many tokens each expert received.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LayerReport {
    pub layer: usize,
    pub positions: Vec<PositionRouting>,
    pub tokens_per_expert: Vec<usize>,
}

/// `anatomy router-stats`: per MoE layer, per position, the chosen experts and weights.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RouterReport {
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub layers: Vec<LayerReport>,
}

/// Collects the routing of a forward call over `ids` into a report.
pub fn router_report(config: &Qwen3Config, ids: &[u32], out: &Output) -> RouterReport {
    let layers = out
        .routing
        .iter()
        .map(|lr| {
            let mut tokens_per_expert = vec![0; config.num_experts];
            let positions = lr
                .routing
                .iter()
                .zip(ids)
                .enumerate()
                .map(|(position, (r, &token))| {
                    for &e in &r.experts {
                        tokens_per_expert[e] += 1;
                    }
                    PositionRouting {
                        position,
                        token,
                        experts: r.experts.clone(),
                        weights: r.weights.clone(),
                    }
                })
                .collect();
            LayerReport {
                layer: lr.layer,
                positions,
                tokens_per_expert,
            }
        })
        .collect();
    RouterReport {
        num_experts: config.num_experts,
        num_experts_per_tok: config.num_experts_per_tok,
        layers,
    }
}

/// The report as a table: one row per position (with the token's text when `text` is
/// given), one column per MoE layer listing `expert:weight`, then the load per expert.
pub fn router_text(report: &RouterReport, text: Option<&dyn Fn(u32) -> String>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let Some(first) = report.layers.first() else {
        return "no MoE layers (a dense model)\n".to_string();
    };
    let _ = write!(s, "{:>4} {:>7} {:<14}", "pos", "id", "token");
    for l in &report.layers {
        let _ = write!(s, " | layer {:<2} expert:weight     ", l.layer);
    }
    s.push('\n');
    for p in 0..first.positions.len() {
        let tok = first.positions[p].token;
        let shown = text.map(|f| format!("{:?}", f(tok))).unwrap_or_default();
        let _ = write!(s, "{p:>4} {tok:>7} {shown:<14}");
        for l in &report.layers {
            let r = &l.positions[p];
            let cell: Vec<String> = r
                .experts
                .iter()
                .zip(&r.weights)
                .map(|(e, w)| format!("{e}:{w:.2}"))
                .collect();
            let _ = write!(s, " | {:<25}", cell.join(" "));
        }
        s.push('\n');
    }
    for l in &report.layers {
        let _ = writeln!(
            s,
            "layer {:>2} tokens per expert: {:?}",
            l.layer, l.tokens_per_expert
        );
    }
    s
}
