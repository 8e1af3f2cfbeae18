//! What a traced forward call records for the server's anatomy stream and the book's
//! evidence: per layer and position, the attention weight each query head puts on
//! position 0 (the attention sink), the router's choices in MoE layers, and on request
//! the queries and keys after q/k-norm and RoPE.
//!
//! Tracing is off unless a [`Session`](crate::qwen3::Session) holds a [`Trace`]:
//! `session.trace = Some(Trace::default())`, then after each
//! [`Model::forward`](crate::qwen3::Model::forward) `session.trace` describes that call
//! (the prefill's positions, or the one decoded position). Off, the forward pass does
//! no extra work and a decode step still allocates nothing.

use crate::moe::Routing;

/// The router's choices in one MoE layer, one [`Routing`] per position of the call.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerRouting {
    pub layer: usize,
    pub routing: Vec<Routing>,
}

/// The record of the last forward call of a session (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Also keep each layer's queries and keys ([`Trace::qk`]); they cost
    /// `layers · n · (q_dim + kv_dim)` floats per call.
    pub keep_qk: bool,
    /// Position of the call's first token in the sequence.
    pub first: usize,
    /// Positions in the call.
    pub positions: usize,
    pub layers: usize,
    /// Query heads per layer.
    pub heads: usize,
    /// `[layer][position][head]`: the softmax weight each query head put on the key at
    /// position 0 (0 where a sliding window no longer sees it).
    pub sink: Vec<f32>,
    /// One entry per MoE layer, in layer order (empty for a dense model).
    pub routing: Vec<LayerRouting>,
    /// One entry per layer when [`Trace::keep_qk`] is set.
    pub qk: Vec<QkLayer>,
}

/// One layer's queries and keys as attention sees them: after the per-head RMSNorm (when
/// the model has one) and after RoPE at each position, each head in transformers' layout
/// (RoPE plane i at dimensions i and i + d/2, also for a GGUF llama file, whose rows the
/// converter permuted).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QkLayer {
    pub layer: usize,
    /// `[positions, heads · head_dim]`, query head `h` at columns `h·d .. (h+1)·d`.
    pub q: Vec<f32>,
    /// `[positions, kv_heads · head_dim]`.
    pub k: Vec<f32>,
}

impl Trace {
    /// A trace that also keeps the queries and keys of every layer.
    pub fn with_qk() -> Trace {
        Trace {
            keep_qk: true,
            ..Trace::default()
        }
    }

    /// The sink shares of layer `layer` at the call's `t`-th position, one per query head.
    pub fn sink_row(&self, layer: usize, t: usize) -> &[f32] {
        let at = (layer * self.positions + t) * self.heads;
        &self.sink[at..at + self.heads]
    }

    /// The mean over query heads of [`Trace::sink_row`].
    pub fn mean_sink(&self, layer: usize, t: usize) -> f32 {
        let row = self.sink_row(layer, t);
        row.iter().sum::<f32>() / row.len().max(1) as f32
    }

    /// Clears the record for a call of `positions` positions starting at `first`.
    pub(crate) fn begin(&mut self, first: usize, positions: usize, layers: usize, heads: usize) {
        (self.first, self.positions, self.layers, self.heads) = (first, positions, layers, heads);
        self.sink.clear();
        self.sink.resize(layers * positions * heads, 0.0);
        self.routing.clear();
        self.qk.clear();
    }

    /// Layer `layer`'s `[position][head]` block of [`Trace::sink`].
    pub(crate) fn sink_layer_mut(&mut self, layer: usize) -> &mut [f32] {
        let len = self.positions * self.heads;
        &mut self.sink[layer * len..(layer + 1) * len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwen3::{Logits, Model, bundled_dir, open};

    /// On the bundled model: a traced prefill returns the same logits and routing as an
    /// untraced one, and each sink share is the softmax weight of key 0 recomputed from the
    /// traced queries and keys (`exp(s_0) / Σ_j exp(s_j)`, s = q·k/√d over the causal span).
    #[test]
    fn trace_records_sink_shares_routing_and_qk() {
        let (config, file) = open(&bundled_dir()).unwrap();
        let model = Model::new(config, &file).unwrap();
        let c = &model.config;
        let ids: Vec<u32> = (0..9).map(|i| 40 + 37 * i).collect();
        let plain = model.logits(&ids).unwrap();
        let mut session = model.session(ids.len()).unwrap();
        session.trace = Some(Trace::with_qk());
        let logits = model
            .forward(&mut session, &ids, Logits::All, None)
            .unwrap();
        assert_eq!(logits, &plain.logits[..]);
        let trace = session.trace.as_ref().unwrap();
        assert_eq!(trace.routing, plain.routing);
        assert_eq!(
            (trace.positions, trace.layers),
            (ids.len(), c.num_hidden_layers)
        );
        let (d, group) = (c.head_dim, c.num_attention_heads / c.num_key_value_heads);
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        for qk in &trace.qk {
            for t in 0..ids.len() {
                for head in 0..c.num_attention_heads {
                    let q = &qk.q[t * qd + head * d..][..d];
                    let g = head / group;
                    let scores: Vec<f64> = (0..=t)
                        .map(|j| {
                            let k = &qk.k[j * kvd + g * d..][..d];
                            let dot: f64 = q.iter().zip(k).map(|(a, b)| f64::from(a * b)).sum();
                            dot / (d as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let sum: f64 = scores.iter().map(|s| (s - max).exp()).sum();
                    let want = (scores[0] - max).exp() / sum;
                    let got = f64::from(trace.sink_row(qk.layer, t)[head]);
                    assert!(
                        (got - want).abs() <= 1e-5,
                        "layer {} pos {t} head {head}: {got} vs {want}",
                        qk.layer
                    );
                }
            }
            // Position 0 sees only itself.
            assert!(trace.sink_row(qk.layer, 0).iter().all(|&p| p == 1.0));
        }
        assert_eq!(model.qk_per_layer(&ids).unwrap(), trace.qk);
    }

    /// Through a [`Stepper`](crate::qwen3::Stepper), as a server drives it: each step's
    /// trace covers the positions that step ran, and its logits are the full model's.
    #[test]
    fn stepper_traces_each_step() {
        let (config, file) = open(&bundled_dir()).unwrap();
        let model = Model::new(config, &file).unwrap();
        let mut step =
            crate::qwen3::Stepper::new(&model, 16, crate::qwen3::Sampling::Greedy).unwrap();
        step.set_trace(Some(Trace::default()));
        let mut context = vec![40u32, 77, 114, 151];
        for _ in 0..3 {
            let next = step.next_token(&context).unwrap();
            let trace = step.trace().unwrap();
            let new = if context.len() == 4 { 4 } else { 1 };
            assert_eq!((trace.first, trace.positions), (context.len() - new, new));
            assert_eq!(trace.routing.len(), model.config.num_hidden_layers);
            let full = model.logits(&context).unwrap();
            let vocab = model.config.vocab_size;
            // A decode step and a prefill may sum in different orders (batched kernels).
            let want = &full.logits[full.logits.len() - vocab..];
            let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert_eq!(step.last_logits().len(), vocab);
            for (a, b) in step.last_logits().iter().zip(want) {
                assert!((a - b).abs() <= 1e-5 * scale, "{a} vs {b}");
            }
            context.push(next);
        }
    }
}
