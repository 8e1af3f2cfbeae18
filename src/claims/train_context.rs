//! Claims of chapter 13 (context): training claims of the source measured on runs recorded in
//! `data/train/experiments/<id>/` by `anatomy experiments`; each status is computed
//! from the recorded numbers by the rules of [`crate::train::experiments::context::verdict`]
//! (written before the runs). Without recorded results the status is needs-data.

use super::{Entry, Outcome, Status};
use crate::train::experiments::context::{
    self, ExtrapolationResults, RouterResults, ThetaResults, verdict,
};
use crate::train::experiments::recorded_dir;

pub const ENTRIES: &[Entry] = &[
    Entry {
        id: "train.direct_extrapolation",
        section: "S0 5.2.1",
        statement: "S0 5.2.1: past the trained length, direct extrapolation fails (perplexity by position)",
        stated: "fails",
        compute: direct_extrapolation,
    },
    Entry {
        id: "train.pi_short",
        section: "S1 troubleshooting",
        statement: "S1 troubleshooting: position interpolation hurts short-text quality (perplexity at ≤ L_train with PI on)",
        stated: "worse",
        compute: pi_short,
    },
    Entry {
        id: "train.ntk_yarn",
        section: "S0 5.2.3–5.2.4, S1 troubleshooting",
        statement: "S0 5.2.3–5.2.4 / S1 table: NTK-aware and YaRN extend the context better than PI without fine-tuning; YaRN best",
        stated: "ordering",
        compute: ntk_yarn,
    },
    Entry {
        id: "train.finetune_router",
        section: "S1 troubleshooting",
        statement: "S1 troubleshooting: MoE fine-tuning loss rises when the router is trained along; freezing the router and a smaller lr fix it",
        stated: "rises; fixed",
        compute: finetune_router,
    },
    Entry {
        id: "train.rope_theta_finetune",
        section: "S1 troubleshooting",
        statement: "S1 troubleshooting: after long-text fine-tuning, garbled output unless rope_theta is raised (or YaRN on)",
        stated: "garbled vs fixed",
        compute: rope_theta_finetune,
    },
];

/// The outcome of a verdict, or needs-data saying why and which command records it.
fn outcome<T: serde::de::DeserializeOwned>(
    id: &str,
    settle: &str,
    short: impl Fn(&T) -> bool,
    rule: impl Fn(&T) -> Option<verdict::Verdict>,
) -> Outcome {
    let needs = |why: String| Outcome {
        value: None,
        computed: "not recorded".into(),
        status: Status::NeedsData,
        note: format!("{why}; record it with `anatomy experiments {id} --record`"),
    };
    let file = format!("data/train/experiments/{id}/results.json");
    let results: T = match context::read_results(&recorded_dir(id)) {
        Ok(r) => r,
        Err(_) => return needs(format!("{file} is missing or unreadable")),
    };
    if short(&results) {
        return needs(format!("{file} is from a --short run"));
    }
    match rule(&results) {
        Some(v) => super::at_small_scale(
            v.value,
            v.computed,
            v.holds,
            format!("{} (from {id}/results.json)", v.note),
            settle,
        ),
        None => needs(format!("{file} lacks a run the rule needs")),
    }
}

fn direct_extrapolation() -> Outcome {
    let toy = outcome(
        "train.direct_extrapolation",
        "the claim is about models trained on billions of tokens, whose attention has learned to rely on the angles it saw; a real trained model read past its trained context at inference would settle it.",
        |r: &ExtrapolationResults| r.short,
        verdict::direct_extrapolation,
    );
    super::real_extrapolation::with_real(
        toy,
        super::real_extrapolation::real_direct_extrapolation(),
        "A fine-tune is not needed to see the failure; it is what lets a model use positions past L (S1 §2).",
    )
}

fn pi_short() -> Outcome {
    let toy = outcome(
        "train.pi_short",
        "the cost of PI on short texts is reported for billion-parameter models whose fastest planes resolve neighbouring tokens finely; a real trained model evaluated with and without PI at inference would settle it.",
        |r: &ExtrapolationResults| r.short,
        verdict::pi_short,
    );
    super::real_extrapolation::with_real(
        toy,
        super::real_extrapolation::real_pi_short(),
        "Whether a short fine-tune with PI on recovers the short-text loss (the source's remedy) needs a fine-tune we do not run.",
    )
}

fn ntk_yarn() -> Outcome {
    let toy = outcome(
        "train.ntk_yarn",
        "the ordering is reported for models of billions of parameters; differences of hundredths of a nat on a hidden-32 model are within its noise, and a real trained model scaled at inference (2× and 4× its trained context) would settle it.",
        |r: &ExtrapolationResults| r.short,
        verdict::ntk_yarn,
    );
    super::real_extrapolation::with_real(
        toy,
        super::real_extrapolation::real_scaling_no_finetune(),
        "The source's ordering after a fine-tune at the longer length (YaRN's 'best with ~0.1% of the data') needs a fine-tune we do not run.",
    )
}

fn finetune_router() -> Outcome {
    outcome(
        "train.finetune_router",
        "the instability is reported for fine-tuning large pretrained MoE models on narrow data; a pretrained MoE of realistic size would settle it.",
        |r: &RouterResults| r.short,
        verdict::finetune_router,
    )
}

fn rope_theta_finetune() -> Outcome {
    outcome(
        "train.rope_theta_finetune",
        "garbled output after long-text fine-tuning is reported for billion-parameter models; a model that large fine-tuned with and without a raised θ would settle it.",
        |r: &ThetaResults| r.short,
        verdict::rope_theta_finetune,
    )
}
