//! What each generated token carries besides its text.
//!
//! The anatomy frame describes the forward step that chose the token — the position just
//! before it: per layer the mean attention share the query heads put on position 0 (the
//! sink of chapter 4), in MoE layers the experts the router chose and their weights
//! (chapter 5), and the five most likely next tokens with their probabilities. A token the
//! thinking budget injected was not chosen by a step and has no frame of its own; it is
//! marked `budget_cut`.

use crate::kernels::softmax_in_place;
use crate::qwen3::Trace;
use crate::tokenizer::Tokenizer;
use serde::Serialize;

/// Candidates each frame lists.
pub const TOP_K: usize = 5;

/// One candidate token.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    pub id: u32,
    pub text: String,
    /// Probability under the model's distribution (before temperature and top-p).
    pub p: f32,
}

/// One layer's part of a frame.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerFrame {
    /// Mean over query heads of the attention weight on position 0.
    pub sink: f32,
    /// The experts the router chose (empty in a dense layer), most weighted first.
    pub experts: Vec<usize>,
    pub weights: Vec<f32>,
}

/// The anatomy of one token.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Frame {
    pub id: u32,
    pub text: String,
    pub layers: Vec<LayerFrame>,
    pub top: Vec<Candidate>,
    pub budget_cut: bool,
}

/// A token's log-probability and the most likely alternatives (OpenAI's `logprobs`).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// The token's text as the vocabulary spells it (invalid UTF-8 as U+FFFD).
pub fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.token_bytes(id)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

/// The `k` largest probabilities of `probs`, largest first (lower id first on ties).
pub fn top_k(probs: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    for (i, &p) in probs.iter().enumerate() {
        if best.len() == k && best.last().is_none_or(|&(_, q)| p <= q) {
            continue;
        }
        let at = best.partition_point(|&(_, q)| q >= p);
        best.insert(at, (i as u32, p));
        best.truncate(k);
    }
    best
}

/// `softmax(logits)` into `probs`.
pub fn probabilities(logits: &[f32], probs: &mut Vec<f32>) {
    probs.clear();
    probs.extend_from_slice(logits);
    softmax_in_place(probs);
}

/// The log-probability of `id` and the `k` most likely tokens, from the step's logits.
pub fn logprob(probs: &[f32], id: u32, k: usize) -> TokenLogprob {
    let ln = |p: f32| p.max(f32::MIN_POSITIVE).ln();
    TokenLogprob {
        id,
        logprob: ln(probs[id as usize]),
        top: top_k(probs, k)
            .into_iter()
            .map(|(i, p)| (i, ln(p)))
            .collect(),
    }
}

/// The frame of token `id`, chosen from `probs` by a step traced in `trace` (its last
/// position is the one that predicted `id`).
pub fn frame(tok: &Tokenizer, id: u32, probs: &[f32], trace: &Trace) -> Frame {
    let t = trace.positions.saturating_sub(1);
    let layers = (0..trace.layers)
        .map(|layer| {
            let routed = trace
                .routing
                .iter()
                .find(|r| r.layer == layer)
                .and_then(|r| r.routing.get(t));
            LayerFrame {
                sink: trace.mean_sink(layer, t),
                experts: routed.map(|r| r.experts.clone()).unwrap_or_default(),
                weights: routed.map(|r| r.weights.clone()).unwrap_or_default(),
            }
        })
        .collect();
    Frame {
        id,
        text: token_text(tok, id),
        layers,
        top: top_k(probs, TOP_K)
            .into_iter()
            .map(|(id, p)| Candidate {
                id,
                text: token_text(tok, id),
                p,
            })
            .collect(),
        budget_cut: false,
    }
}

/// The frame of a token the thinking budget injected.
pub fn injected(tok: &Tokenizer, id: u32) -> Frame {
    Frame {
        id,
        text: token_text(tok, id),
        layers: Vec::new(),
        top: Vec::new(),
        budget_cut: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_sorted_and_keeps_the_first_of_ties() {
        let p = [0.1, 0.3, 0.05, 0.3, 0.25];
        assert_eq!(top_k(&p, 3), vec![(1, 0.3), (3, 0.3), (4, 0.25)]);
        assert_eq!(top_k(&p, 0), vec![]);
        assert_eq!(top_k(&p, 9).len(), 5);
    }

    #[test]
    fn logprob_is_the_log_of_the_softmax() {
        let mut probs = Vec::new();
        probabilities(&[0.0, 1.0, 2.0], &mut probs);
        let lp = logprob(&probs, 0, 1);
        let z = 1.0f32 + 1f32.exp() + 2f32.exp();
        assert!((lp.logprob - (1.0 / z).ln()).abs() < 1e-6);
        assert_eq!(lp.top[0].0, 2);
    }
}
