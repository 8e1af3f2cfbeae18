//! Chapter 13.2 — long-text fine-tuning with the original or a raised rope_theta (source S1
//! troubleshooting table): the base fine-tuned at `4L` with its trained base, with the
//! base raised as NTK-aware scaling raises it for `s = 4`, and with YaRN; held-out
//! cross-entropy by position past `L`, and a greedy continuation of each.

use super::super::ExperimentOptions;
use super::eval::{PositionCurve, Scaling, greedy, position_curve, windows};
use super::extrapolation::{FINETUNE_FACTOR, original_finetune, yarn_finetune};
use super::shared::{
    BASE_THETA, Machine, RunRecord, Sizes, Trained, base, load_domains, long_finetune, write_json,
};
use crate::error::Result;
use crate::long_context::scaling::ntk_base;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// A greedy continuation of a held-out prompt.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub model: String,
    /// The prompt's length in tokens (past `L`, so the continuation is too).
    pub prompt_tokens: usize,
    /// The last part of the prompt, and what the model wrote after it.
    pub prompt_tail: String,
    pub continuation: String,
    /// What the held-out text really says next.
    pub reference: String,
}

/// `results.json` of `train.rope_theta_finetune`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThetaResults {
    pub id: String,
    pub short: bool,
    pub sizes: Sizes,
    pub machine: Machine,
    pub wall_time_s: f64,
    pub runs: Vec<RunRecord>,
    /// The raised base.
    pub raised_theta: f64,
    /// By position over windows of `8L`: the base (no scaling) and each fine-tune with the
    /// setting it was fine-tuned with.
    pub curves: Vec<PositionCurve>,
    pub samples: Vec<Sample>,
}

impl ThetaResults {
    pub fn curve(&self, model: &str) -> Option<&PositionCurve> {
        self.curves.iter().find(|c| c.model == model)
    }
}

/// The raised base: NTK-aware's for `s = 4` and head dimension 16.
pub fn raised_theta(head_dim: usize) -> f64 {
    ntk_base(BASE_THETA, FINETUNE_FACTOR, head_dim)
}

/// `train.rope_theta_finetune`.
pub fn run(opts: &ExperimentOptions) -> Result<String> {
    let start = Instant::now();
    let machine = Machine::here();
    let sizes = Sizes::new(opts.short);
    let d = load_domains(opts)?;
    let base = base(&sizes, &d)?;
    let theta = raised_theta(base.params.config.head_dim);
    let original = original_finetune(&sizes, &d, &base)?;
    let raised = long_finetune(&sizes, &d, &base, "long-theta", Scaling::Theta { theta })?;
    let yarn = yarn_finetune(&sizes, &d, &base)?;
    let long = windows(&d.en_heldout, sizes.long_windows, sizes.max_len())?;
    let models: [&Trained; 4] = [&base, &original, &raised, &yarn];
    let mut curves = Vec::new();
    for t in models {
        curves.push(position_curve(
            &t.record.name,
            &t.params,
            &t.record.rope,
            &long,
            sizes.train_len,
        )?);
    }
    let tok = crate::tokenizer::Tokenizer::from_file(&opts.vocab)?;
    // One prompt from the middle of the held-out stream, longer than L.
    let prompt_windows = windows(&d.en_heldout, 3, sizes.sample_prompt + sizes.sample_tokens)?;
    let w = &prompt_windows[1];
    let (prompt, reference) = w.split_at(sizes.sample_prompt);
    let tail = &prompt[prompt.len().saturating_sub(24)..];
    let mut samples = Vec::new();
    for t in models {
        let p = super::eval::with_scaling(&t.params, &t.record.rope, sizes.train_len)?;
        let out = greedy(&p, prompt, sizes.sample_tokens)?;
        samples.push(Sample {
            model: t.record.name.clone(),
            prompt_tokens: prompt.len(),
            prompt_tail: tok.decode(tail)?,
            continuation: tok.decode(&out)?,
            reference: tok.decode(reference)?,
        });
    }
    let r = ThetaResults {
        id: "train.rope_theta_finetune".into(),
        short: opts.short,
        sizes,
        machine,
        wall_time_s: start.elapsed().as_secs_f64(),
        runs: models.iter().map(|t| t.record.clone()).collect(),
        raised_theta: theta,
        curves,
        samples,
    };
    write_json(&opts.out.join("results.json"), &r)?;
    let l = r.sizes.train_len;
    let mut s = String::new();
    for c in &r.curves {
        let f = |a, b| c.mean(a, b).map_or("-".into(), |v: f64| format!("{v:.3}"));
        s += &format!(
            "  {} ({}): CE < L {}, [L, 4L) {}, [4L, 8L) {}\n",
            c.model,
            c.scaling.label(),
            f(0, l),
            f(l, 4 * l),
            f(4 * l, 8 * l)
        );
    }
    for x in &r.samples {
        s += &format!(
            "  {}: …{:?} → {:?}\n",
            x.model, x.prompt_tail, x.continuation
        );
    }
    Ok(s + &format!("  wall time {:.0} s\n", r.wall_time_s))
}
