//! Chapter 13.2 — the rules that turn the context experiments' recorded numbers into a
//! verdict on the text (written before the recorded runs; the claims registry applies
//! them to `data/train/experiments/<id>/results.json`). `L` is the trained length;
//! "position" is the 0-based index of the token that predicts the next one.

use super::eval::Scaling;
use super::extrapolation::{ExtrapolationResults, FINETUNE_FACTOR, INFERENCE_FACTOR};
use super::router::{HIGH_LR, LOW_LR, RouterResults, RouterRun};
use super::theta::ThetaResults;

/// What a rule found: the headline number, whether the text's statement holds, the
/// numbers behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub value: f64,
    pub holds: bool,
    pub computed: String,
    pub note: String,
}

// ANCHOR: rules
/// "Fails": perplexity over positions `[2L, 8L)` at least this many times that over
/// `[L/2, L)` (the end of the trained range) with no scaling.
pub const FAIL_RATIO: f64 = 1.5;
/// "Worse": the PI fine-tune's short-text cross-entropy above the control's by this much.
pub const WORSE_NATS: f64 = 0.02;
/// "Rises": the fine-tune domain's held-out loss climbs this far above its best so far.
pub const RISE_NATS: f64 = 0.05;
/// "Garbled vs fixed": the original base's cross-entropy past `L` above each fix's by
/// this much (ln 1.1: 10 % in perplexity).
pub const FIXED_NATS: f64 = 0.095_310_179_804_324_87;

/// `train.direct_extrapolation`.
pub fn direct_extrapolation(r: &ExtrapolationResults) -> Option<Verdict> {
    let l = r.sizes.train_len;
    let c = r.curve("base", &Scaling::None)?;
    let (inside, past) = (c.mean(l / 2, l)?, c.mean(2 * l, 8 * l)?);
    let ratio = (past - inside).exp();
    Some(Verdict {
        value: ratio,
        holds: ratio >= FAIL_RATIO,
        computed: format!(
            "perplexity ×{ratio:.2} past 2L (CE {past:.3} at [2L, 8L) vs {inside:.3} at [L/2, L); L = {l})"
        ),
        note: format!(
            "rule: fails when perplexity over [2L, 8L) is ≥ {FAIL_RATIO}× that over [L/2, L) with no scaling"
        ),
    })
}
// ANCHOR_END: rules

/// `train.pi_short`.
pub fn pi_short(r: &ExtrapolationResults) -> Option<Verdict> {
    let pi4 = Scaling::Pi {
        factor: FINETUNE_FACTOR,
    };
    let pi8 = Scaling::Pi {
        factor: INFERENCE_FACTOR,
    };
    let yarn4 = Scaling::Yarn {
        factor: FINETUNE_FACTOR,
    };
    let ft = r.short_ce("long-pi", &pi4)? - r.short_ce("long-original", &Scaling::None)?;
    let yarn = r.short_ce("long-yarn", &yarn4)? - r.short_ce("long-original", &Scaling::None)?;
    let inference = r.short_ce("base", &pi8)? - r.short_ce("base", &Scaling::None)?;
    Some(Verdict {
        value: ft,
        holds: ft >= WORSE_NATS,
        computed: format!(
            "after the 4L fine-tune, short-text CE {ft:+.3} nats with PI (YaRN {yarn:+.3}) vs the same fine-tune without scaling; \
             PI s=8 on the base without fine-tuning {inference:+.3}"
        ),
        note: format!(
            "rule: worse when the PI fine-tune's CE on windows of L is ≥ {WORSE_NATS} nats above the unscaled fine-tune's"
        ),
    })
}

/// `train.ntk_yarn`.
pub fn ntk_yarn(r: &ExtrapolationResults) -> Option<Verdict> {
    let l = r.sizes.train_len;
    let s = INFERENCE_FACTOR;
    let past = |scaling: &Scaling| r.curve("base", scaling)?.mean(l, 8 * l);
    let none = past(&Scaling::None)?;
    let pi = past(&Scaling::Pi { factor: s })?;
    let ntk = past(&Scaling::Ntk { factor: s })?;
    let dynamic = past(&Scaling::Dynamic { factor: 1.0 })?;
    let yarn = past(&Scaling::Yarn { factor: s })?;
    let holds = ntk < pi && yarn < pi && yarn < ntk && yarn < dynamic && yarn < none;
    Some(Verdict {
        value: yarn,
        holds,
        computed: format!(
            "CE over [L, 8L) without fine-tuning: YaRN {yarn:.3}, NTK-aware {ntk:.3}, dynamic NTK {dynamic:.3}, PI {pi:.3}, none {none:.3}"
        ),
        note: "rule: holds when NTK-aware and YaRN are both below PI and YaRN is the lowest of all five"
            .into(),
    })
}

/// How far the Chinese held-out loss climbs above its best earlier value (≤ 0 = never).
pub fn rebound(run: &RouterRun) -> f64 {
    let mut best = f64::INFINITY;
    let mut worst_rise = f64::NEG_INFINITY;
    for &(_, _, zh) in &run.evals {
        let zh = f64::from(zh);
        if best.is_finite() {
            worst_rise = worst_rise.max(zh - best);
        }
        best = best.min(zh);
    }
    worst_rise
}

/// `train.finetune_router`.
pub fn finetune_router(r: &RouterResults) -> Option<Verdict> {
    let trained = r.run(false, HIGH_LR)?;
    let fixed = r.run(true, LOW_LR)?;
    let (up, fixed_up) = (rebound(trained), rebound(fixed));
    let ends = |run: &RouterRun| {
        let (a, b) = (run.evals.first()?, run.evals.last()?);
        Some(format!(
            "zh {:.2}→{:.2}, en {:.2}→{:.2}",
            a.2, b.2, a.1, b.1
        ))
    };
    let others: Vec<String> = r
        .runs
        .iter()
        .map(|run| {
            format!(
                "{} lr {:e}: {:+.3}",
                if run.frozen_router {
                    "frozen"
                } else {
                    "trainable"
                },
                run.lr,
                rebound(run)
            )
        })
        .collect();
    Some(Verdict {
        value: up,
        holds: up > RISE_NATS && fixed_up <= RISE_NATS,
        computed: format!(
            "router trainable, lr {HIGH_LR:e}: {} (largest climb above the best earlier zh loss {up:+.3}; negative = it never rose); frozen, lr {LOW_LR:e}: {} ({fixed_up:+.3}); every run's largest climb: {}",
            ends(trained)?,
            ends(fixed)?,
            others.join("; ")
        ),
        note: format!(
            "rule: rises when the fine-tune domain's held-out loss climbs > {RISE_NATS} nats above its best earlier evaluation; holds when the trainable router at the high lr rises and the frozen one at the low lr does not"
        ),
    })
}

/// `train.rope_theta_finetune`.
pub fn rope_theta_finetune(r: &ThetaResults) -> Option<Verdict> {
    let l = r.sizes.train_len;
    let past = |model: &str| r.curve(model)?.mean(l, 4 * l);
    let original = past("long-original")?;
    let raised = past("long-theta")?;
    let yarn = past("long-yarn")?;
    let base = past("base")?;
    let gap = original - raised.min(yarn);
    Some(Verdict {
        value: original - raised,
        holds: original - raised >= FIXED_NATS && original - yarn >= FIXED_NATS,
        computed: format!(
            "CE over [L, 4L) after the 4L fine-tune: original theta {original:.3}, raised theta ({:.0}) {raised:.3}, YaRN {yarn:.3} (base before fine-tuning {base:.3}; gap to the better fix {gap:+.3})",
            r.raised_theta
        ),
        note: format!(
            "rule: garbled vs fixed when the original-theta fine-tune's CE past L is ≥ ln 1.1 = {FIXED_NATS:.3} nats above both the raised-theta and the YaRN fine-tune's"
        ),
    })
}
