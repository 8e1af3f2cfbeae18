//! The book's phenomena measured on a real trained model run by this engine: the attention
//! sink on the first position (chapter 4) and the mean post-RoPE score against distance
//! beside the analytic prior `S(τ)` (chapter 2).
//!
//! Both read a [`Trace`] of ordinary forward passes over tokenised [`SNIPPETS`] or corpus
//! windows; nothing here changes what the model computes. `data/real/evidence-hf-*.json`
//! holds the same measurements made by transformers on the GGUF files of
//! `scripts/get-real-models.sh` (scripts/gen_real_evidence.py); the claims judge from it and
//! tests/suite/real_evidence.rs checks these functions against it.

use crate::error::Result;
use crate::qwen3::{Logits, Model, Trace};
use serde::Serialize;

/// Varied text — English prose, Chinese, code, lists, numbers — so that a sink is not a
/// property of one genre.
pub const SNIPPETS: &[&str] = &[
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch.",
    "In 1905, Albert Einstein published four papers that changed how physicists think about space, time and light.",
    "Please remember to water the plants on Tuesday and to feed the cat twice a day.",
    "The committee met on Monday to discuss the budget, but no decision was reached before the meeting ended.",
    "Rivers carry sediment from the mountains to the sea, building deltas over thousands of years.",
    "She opened the old letter slowly, unsure whether she wanted to know what it said.",
    "今天天气很好，我们一起去公园散步，然后在湖边吃午饭。",
    "机器学习模型通过大量数据进行训练，从而学会预测新的样本。",
    "长城是中国古代的军事防御工程，全长超过两万公里。",
    "他每天早上六点起床，先跑步半小时，再吃早餐去上班。",
    "注意力机制让模型在生成每个词时关注输入中最相关的部分。",
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "fn main() {\n    let v: Vec<u32> = (1..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "SELECT name, COUNT(*) FROM orders WHERE status = 'shipped' GROUP BY name ORDER BY 2 DESC;",
    "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\nreturn sum;",
    "Shopping list:\n- eggs\n- milk\n- bread\n- apples\n- coffee\n- rice\n",
    "1. Preheat the oven to 180 degrees.\n2. Mix flour and sugar.\n3. Add the eggs.\n4. Bake for 30 minutes.",
    "Monday: gym\nTuesday: piano lesson\nWednesday: groceries\nThursday: dentist\nFriday: movie night",
    "3.14159, 2.71828, 1.41421, 1.73205, 0.57721, 1.61803, 2.50290, 4.66920",
    "Q: What is the capital of France?\nA: Paris.\nQ: What is the capital of Japan?\nA: Tokyo.",
    "Dear Sir or Madam, I am writing to apply for the position of assistant librarian advertised last week.",
    "The mitochondria is the powerhouse of the cell, producing most of the chemical energy the cell needs.",
];

/// Queries before this position are left out of the sink average: with a handful of keys
/// every key gets a large share.
pub const FIRST_QUERY: usize = 4;

/// The attention on position 0, averaged over query heads, positions `≥ FIRST_QUERY` and
/// snippets.
#[derive(Clone, Debug, Serialize)]
pub struct SinkProfile {
    /// Mean share on position 0, one value per layer.
    pub per_layer: Vec<f64>,
    /// Mean over all layers of `per_layer`.
    pub mean: f64,
    /// The share position 0 would get under equal attention over the causal prefix,
    /// averaged over the same queries (`1/(t+1)`).
    pub uniform: f64,
    /// Heads (layer × query head) whose mean share on position 0 exceeds one half.
    pub heads_over_half: usize,
    pub heads: usize,
    /// Snippets and query positions averaged over.
    pub snippets: usize,
    pub queries: usize,
}

// ANCHOR: sink
/// Runs each window of ids (a tokenised snippet) through `model` with a [`Trace`] and
/// averages the share of attention each layer's heads put on position 0.
pub fn sink_profile(model: &Model, windows: &[Vec<u32>]) -> Result<SinkProfile> {
    let c = &model.config;
    let (layers, heads) = (c.num_hidden_layers, c.num_attention_heads);
    let mut per_head = vec![0.0f64; layers * heads];
    let (mut uniform, mut queries) = (0.0f64, 0usize);
    for ids in windows {
        let mut session = model.session(ids.len())?;
        session.trace = Some(Trace::default());
        model.forward(&mut session, ids, Logits::Last, None)?;
        let trace = session.trace.as_ref().expect("the session holds a trace");
        for t in FIRST_QUERY..ids.len() {
            for layer in 0..layers {
                let row = trace.sink_row(layer, t);
                for (acc, &p) in per_head[layer * heads..].iter_mut().zip(row) {
                    *acc += f64::from(p);
                }
            }
            uniform += 1.0 / (t + 1) as f64;
            queries += 1;
        }
    }
    let n = queries.max(1) as f64;
    per_head.iter_mut().for_each(|x| *x /= n);
    let per_layer: Vec<f64> = per_head
        .chunks(heads)
        .map(|h| h.iter().sum::<f64>() / heads as f64)
        .collect();
    Ok(SinkProfile {
        mean: per_layer.iter().sum::<f64>() / layers.max(1) as f64,
        per_layer,
        uniform: uniform / n,
        heads_over_half: per_head.iter().filter(|&&x| x > 0.5).count(),
        heads: layers * heads,
        snippets: windows.len(),
        queries,
    })
}
// ANCHOR_END: sink

/// The mean post-RoPE score `q·k/√d` against the distance `τ = t − j` between query and
/// key, per layer, beside the analytic prior `S(τ)` of chapter 2 for the model's head size
/// and RoPE base.
#[derive(Clone, Debug, Serialize)]
pub struct DecayProfile {
    /// The distances measured, `0..taus`.
    pub taus: usize,
    /// `[layer][τ]`: mean score over query heads, query positions and windows.
    pub per_layer: Vec<Vec<f64>>,
    /// `S(τ) = Σ_j cos(τ θ_j)` for the model's head dimension and RoPE base.
    pub prior: Vec<f64>,
    pub rope_base: f64,
}

/// Averages `q_t·k_{t−τ}/√d` over every query head (with the key head it shares), every
/// query position with `t ≥ τ`, and the windows of ids, for `τ < taus`.
// ANCHOR: decay
pub fn decay_profile(model: &Model, windows: &[Vec<u32>], taus: usize) -> Result<DecayProfile> {
    let c = &model.config;
    let (d, group) = (c.head_dim, c.num_attention_heads / c.num_key_value_heads);
    let (qd, kvd) = (c.q_dim(), c.kv_dim());
    let mut sum = vec![vec![0.0f64; taus]; c.num_hidden_layers];
    let mut count = vec![0usize; taus];
    for ids in windows {
        for qk in model.qk_per_layer(ids)? {
            for t in 0..ids.len() {
                for tau in 0..taus.min(t + 1) {
                    let j = t - tau;
                    for head in 0..c.num_attention_heads {
                        let q = &qk.q[t * qd + head * d..][..d];
                        let k = &qk.k[j * kvd + (head / group) * d..][..d];
                        let dot: f32 = q.iter().zip(k).map(|(a, b)| a * b).sum();
                        sum[qk.layer][tau] += f64::from(dot) / (d as f64).sqrt();
                    }
                    if qk.layer == 0 {
                        count[tau] += c.num_attention_heads;
                    }
                }
            }
        }
    }
    for row in &mut sum {
        for (x, &n) in row.iter_mut().zip(&count) {
            *x /= n.max(1) as f64;
        }
    }
    let base = c.rope.theta;
    Ok(DecayProfile {
        taus,
        per_layer: sum,
        prior: (0..taus)
            .map(|tau| crate::position::decay::decay_sum(d, base, tau as f64))
            .collect(),
        rope_base: base,
    })
}
// ANCHOR_END: decay

/// Whether a row decays: the mean over the farther half of the distances is below the
/// mean over the nearer quarter (`τ ≥ 1`, so the token's own key is left out).
pub fn decays(row: &[f64]) -> bool {
    let n = row.len();
    if n < 8 {
        return false;
    }
    let near = &row[1..1 + n / 4];
    let far = &row[n / 2..];
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    mean(far) < mean(near)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwen3::{bundled_dir, open};

    /// On the bundled model: shares lie in [0, 1], the uniform share is the mean of
    /// `1/(t+1)` over the queries counted, and the decay's prior starts at d/2.
    #[test]
    fn profiles_on_the_bundled_model() {
        let (config, file) = open(&bundled_dir()).unwrap();
        let model = Model::new(config, &file).unwrap();
        let tok = crate::qwen3::generate::model_tokenizer(&bundled_dir()).unwrap();
        let snippets = &SNIPPETS[..2];
        let windows: Vec<Vec<u32>> = snippets.iter().map(|s| tok.encode(s).unwrap()).collect();
        let sink = sink_profile(&model, &windows).unwrap();
        assert!(sink.per_layer.iter().all(|x| (0.0..=1.0).contains(x)));
        let mut want = (0.0, 0);
        for s in snippets {
            for t in FIRST_QUERY..tok.encode(s).unwrap().len() {
                want = (want.0 + 1.0 / (t + 1) as f64, want.1 + 1);
            }
        }
        assert_eq!(sink.queries, want.1);
        assert!((sink.uniform - want.0 / want.1 as f64).abs() < 1e-12);
        let decay = decay_profile(&model, &windows, 8).unwrap();
        assert_eq!(decay.prior[0], (model.config.head_dim / 2) as f64);
        assert_eq!(decay.per_layer.len(), model.config.num_hidden_layers);
    }

    #[test]
    fn decays_compares_far_with_near() {
        let falling: Vec<f64> = (0..16).map(|t| -(t as f64)).collect();
        assert!(decays(&falling));
        assert!(!decays(&falling.iter().map(|x| -x).collect::<Vec<_>>()));
    }
}
