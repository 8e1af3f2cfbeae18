//! Chapter 13.2 — extrapolation past the trained length (source S0 5.2.1–5.2.4, S1
//! troubleshooting table): the base model trained at `L` read up to `8L` with no scaling,
//! PI, NTK-aware, dynamic NTK and YaRN set in its config at inference, and after a short
//! fine-tune at `4L` with PI or YaRN; and short text (windows of `L`) with PI on.

use super::super::ExperimentOptions;
use super::eval::{PositionCurve, Scaling, position_curve, windows};
use super::shared::{
    Domains, Machine, RunRecord, Sizes, Trained, base, load_domains, long_finetune, write_json,
};
use crate::error::Result;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The length ratio every inference-time scaling is set for: `8L` from `L`.
pub const INFERENCE_FACTOR: f64 = 8.0;
/// The fine-tunes' ratio: `4L` from `L`.
pub const FINETUNE_FACTOR: f64 = 4.0;

/// The mean held-out cross-entropy of windows of `L` tokens (every prediction in them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShortEval {
    pub model: String,
    pub scaling: Scaling,
    pub windows: usize,
    pub window_len: usize,
    pub ce: f64,
}

/// `results.json` of `train.direct_extrapolation`, `train.pi_short` and `train.ntk_yarn`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExtrapolationResults {
    pub id: String,
    pub short: bool,
    pub sizes: Sizes,
    pub machine: Machine,
    /// This experiment's wall time (its shared runs' training included when it trained
    /// them; `runs[].train_wall_s` gives each run's own).
    pub wall_time_s: f64,
    pub runs: Vec<RunRecord>,
    /// By-position curves over windows of `8L`.
    pub curves: Vec<PositionCurve>,
    /// Short text: windows of `L`.
    pub short_text: Vec<ShortEval>,
}

impl ExtrapolationResults {
    /// The curve of `model` with `scaling`.
    pub fn curve(&self, model: &str, scaling: &Scaling) -> Option<&PositionCurve> {
        self.curves
            .iter()
            .find(|c| c.model == model && &c.scaling == scaling)
    }

    pub fn short_ce(&self, model: &str, scaling: &Scaling) -> Option<f64> {
        self.short_text
            .iter()
            .find(|c| c.model == model && &c.scaling == scaling)
            .map(|c| c.ce)
    }
}

/// The fine-tune at `4L` with PI, and with YaRN.
pub fn pi_finetune(s: &Sizes, d: &Domains, b: &Trained) -> Result<Trained> {
    let rope = Scaling::Pi {
        factor: FINETUNE_FACTOR,
    };
    long_finetune(s, d, b, "long-pi", rope)
}

pub fn yarn_finetune(s: &Sizes, d: &Domains, b: &Trained) -> Result<Trained> {
    let rope = Scaling::Yarn {
        factor: FINETUNE_FACTOR,
    };
    long_finetune(s, d, b, "long-yarn", rope)
}

/// The fine-tune at `4L` with the trained frequencies (the control of `train.pi_short`).
pub fn original_finetune(s: &Sizes, d: &Domains, b: &Trained) -> Result<Trained> {
    long_finetune(s, d, b, "long-original", Scaling::None)
}

struct Context {
    start: Instant,
    machine: Machine,
    sizes: Sizes,
    domains: Domains,
    base: Trained,
    long_windows: Vec<Vec<u32>>,
    short_windows: Vec<Vec<u32>>,
}

fn context(opts: &ExperimentOptions) -> Result<Context> {
    let start = Instant::now();
    // The machine and commit as the run starts (a commit made while it runs is not its code).
    let machine = Machine::here();
    let sizes = Sizes::new(opts.short);
    let domains = load_domains(opts)?;
    let base = base(&sizes, &domains)?;
    let long_windows = windows(&domains.en_heldout, sizes.long_windows, sizes.max_len())?;
    let short_windows = windows(&domains.en_heldout, sizes.short_windows, sizes.train_len)?;
    Ok(Context {
        start,
        machine,
        sizes,
        domains,
        base,
        long_windows,
        short_windows,
    })
}

impl Context {
    fn curve(&self, t: &Trained, scaling: &Scaling) -> Result<PositionCurve> {
        position_curve(
            &t.record.name,
            &t.params,
            scaling,
            &self.long_windows,
            self.sizes.train_len,
        )
    }

    fn short(&self, t: &Trained, scaling: &Scaling) -> Result<ShortEval> {
        let c = position_curve(
            &t.record.name,
            &t.params,
            scaling,
            &self.short_windows,
            self.sizes.train_len,
        )?;
        let ce = c.mean(0, usize::MAX).unwrap_or(f64::NAN);
        Ok(ShortEval {
            model: t.record.name.clone(),
            scaling: scaling.clone(),
            windows: c.windows,
            window_len: c.window_len,
            ce,
        })
    }

    fn finish(
        self,
        id: &str,
        opts: &ExperimentOptions,
        runs: Vec<RunRecord>,
        curves: Vec<PositionCurve>,
        short_text: Vec<ShortEval>,
    ) -> Result<ExtrapolationResults> {
        let r = ExtrapolationResults {
            id: id.into(),
            short: opts.short,
            sizes: self.sizes,
            machine: self.machine,
            wall_time_s: self.start.elapsed().as_secs_f64(),
            runs,
            curves,
            short_text,
        };
        write_json(&opts.out.join("results.json"), &r)?;
        Ok(r)
    }
}

fn summary(r: &ExtrapolationResults) -> String {
    let mut s = String::new();
    let l = r.sizes.train_len;
    for c in &r.curves {
        let f = |a, b| c.mean(a, b).map_or("-".into(), |v: f64| format!("{v:.3}"));
        s += &format!(
            "  {} with {}: CE < L {}, [L, 2L) {}, [2L, 8L) {}\n",
            c.model,
            c.scaling.label(),
            f(0, l),
            f(l, 2 * l),
            f(2 * l, 8 * l)
        );
    }
    for e in &r.short_text {
        s += &format!(
            "  short text (windows of {}): {} with {}: CE {:.4}\n",
            e.window_len,
            e.model,
            e.scaling.label(),
            e.ce
        );
    }
    s + &format!("  wall time {:.0} s\n", r.wall_time_s)
}

/// `train.direct_extrapolation`: the base read to `8L` with no scaling.
pub fn run_direct(opts: &ExperimentOptions) -> Result<String> {
    let cx = context(opts)?;
    let curves = vec![cx.curve(&cx.base, &Scaling::None)?];
    let runs = vec![cx.base.record.clone()];
    let r = cx.finish("train.direct_extrapolation", opts, runs, curves, Vec::new())?;
    Ok(summary(&r))
}

/// `train.pi_short`: short text with PI on — at inference on the base, and after the PI
/// fine-tune at `4L` against the same fine-tune with the trained frequencies.
pub fn run_pi_short(opts: &ExperimentOptions) -> Result<String> {
    let cx = context(opts)?;
    let (s, d, b) = (&cx.sizes, &cx.domains, &cx.base);
    let pi = pi_finetune(s, d, b)?;
    let original = original_finetune(s, d, b)?;
    let yarn = yarn_finetune(s, d, b)?;
    let pi8 = Scaling::Pi {
        factor: INFERENCE_FACTOR,
    };
    let pi4 = Scaling::Pi {
        factor: FINETUNE_FACTOR,
    };
    let yarn4 = Scaling::Yarn {
        factor: FINETUNE_FACTOR,
    };
    let short = vec![
        cx.short(b, &Scaling::None)?,
        cx.short(b, &pi4)?,
        cx.short(b, &pi8)?,
        cx.short(&original, &Scaling::None)?,
        cx.short(&pi, &pi4)?,
        cx.short(&yarn, &yarn4)?,
    ];
    let runs = vec![
        b.record.clone(),
        original.record.clone(),
        pi.record.clone(),
        yarn.record.clone(),
    ];
    let r = cx.finish("train.pi_short", opts, runs, Vec::new(), short)?;
    Ok(summary(&r))
}

/// `train.ntk_yarn`: the base read to `8L` with PI, NTK-aware and YaRN at `s = 8` and dynamic
/// NTK, and the PI and
/// YaRN fine-tunes at `4L` read with their own settings.
pub fn run_ntk_yarn(opts: &ExperimentOptions) -> Result<String> {
    let cx = context(opts)?;
    let (s, d, b) = (&cx.sizes, &cx.domains, &cx.base);
    let f = INFERENCE_FACTOR;
    let mut curves = Vec::new();
    for scaling in [
        Scaling::None,
        Scaling::Pi { factor: f },
        Scaling::Ntk { factor: f },
        // factor 1: at length n the base is NTK-aware's for s = n/L, stretched only as
        // much as the length needs (with factor s transformers' formula over-stretches).
        Scaling::Dynamic { factor: 1.0 },
        Scaling::Yarn { factor: f },
    ] {
        curves.push(cx.curve(b, &scaling)?);
    }
    let pi = pi_finetune(s, d, b)?;
    let yarn = yarn_finetune(s, d, b)?;
    curves.push(cx.curve(&pi, &pi.record.rope)?);
    curves.push(cx.curve(&yarn, &yarn.record.rope)?);
    let runs = vec![b.record.clone(), pi.record.clone(), yarn.record.clone()];
    let r = cx.finish("train.ntk_yarn", opts, runs, curves, Vec::new())?;
    Ok(summary(&r))
}
