//! Claims of chapter 13 (dynamics): training claims of the source measured on runs recorded in
//! `data/train/experiments/<id>/` by `anatomy experiments`; each status is computed
//! from the recorded numbers by the rule in the experiment's module
//! (`crate::train::experiments::dynamics::{collapse, muon, max_logit, glitch}`).

use super::{Entry, Outcome, Status, at_small_scale};
use crate::error::Result;
use crate::train::experiments::dynamics::{collapse, glitch, max_logit, muon, read_results};
use crate::train::experiments::recorded_dir;

/// The outcome when the results are missing (or unreadable: the note says why).
fn needs_data(id: &str, why: Option<String>) -> Outcome {
    Outcome {
        value: None,
        computed: why.unwrap_or_else(|| "not recorded yet".into()),
        status: Status::NeedsData,
        note: format!(
            "Recorded by `anatomy experiments {id} --record` (from the crate root, release build), which writes data/train/experiments/{id}/results.json."
        ),
    }
}

/// Reads the recorded results of `id` and applies `compute`; needs-data when absent.
fn recorded<T: for<'de> serde::Deserialize<'de>>(
    id: &str,
    compute: impl FnOnce(&T) -> Result<Outcome>,
) -> Outcome {
    match read_results::<T>(&recorded_dir(id)) {
        Ok(Some(r)) => compute(&r).unwrap_or_else(|e| needs_data(id, Some(e.to_string()))),
        Ok(None) => needs_data(id, None),
        Err(e) => needs_data(id, Some(e.to_string())),
    }
}

fn train_collapse() -> Outcome {
    recorded(collapse::ID, |r: &collapse::CollapseResults| {
        let v = collapse::verdict(r)?;
        let runs: Vec<String> = r
            .runs
            .iter()
            .zip(v.worst_ratio.iter().zip(&v.lowest_entropy))
            .map(|(run, (ratio, h))| format!("{}: {ratio:.2}× (entropy {h:.2})", run.name))
            .collect();
        let note = match (v.collapsed_without_loss, v.aux_even && v.bias_even) {
            (true, true) => "As the text says: without a balancing loss some layer's busiest expert took at least 3× the mean share by the end, and both the aux loss and the aux-free bias kept every layer at 2× or less.".to_string(),
            (false, _) => format!(
                "Without a balancing loss the router did not collapse on this run: the busiest expert of any layer ended at {:.2}× the mean share (collapse means ≥ 3×). At this scale and length the text's collapse is not seen.",
                v.worst_ratio[0]
            ),
            (true, false) => format!(
                "The unbalanced run collapsed, but the balancing did not keep every layer within 2× the mean share (aux loss {:.2}×, aux-free bias {:.2}×).",
                v.worst_ratio[1], v.worst_ratio[2]
            ),
        };
        Ok(at_small_scale(
            v.worst_ratio[0],
            format!(
                "busiest expert ÷ mean share in the worst layer over the last 10% of {} steps — {}",
                r.header.budget.steps,
                runs.join("; ")
            ),
            v.reproduced(),
            note,
            "router collapse is reported for models with thousands of routing decisions per expert per step over billions of tokens (Switch Transformer, GShard); a run of that length, or a released MoE trained without balancing, would settle it.",
        ))
    })
}

/// Says whether a sweep's best rate had a worse rate tried on each side.
fn bracket(bracketed: bool) -> &'static str {
    if bracketed {
        "bracketed by the sweep"
    } else {
        "at the sweep's edge"
    }
}

fn train_muon_efficiency() -> Outcome {
    recorded(muon::ID, |r: &muon::MuonResults| {
        let v = muon::verdict(r)?;
        let fmt = |xs: &[f64]| {
            xs.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let note = if v.reproduced() {
            format!(
                "As the text says: at equal tokens Muon's mean final held-out loss is {:.3} nats lower, more than the seeds' spread of {:.3}.",
                v.gain, v.spread
            )
        } else if v.gain > 0.0 {
            format!(
                "Muon's mean is lower by {:.3} nats, but the seeds scatter by {:.3}: at this scale no gain beyond seed noise.",
                v.gain, v.spread
            )
        } else {
            format!(
                "AdamW alone ended lower by {:.3} nats (seed spread {:.3}): at this scale Muon is not more token-efficient.",
                -v.gain, v.spread
            )
        };
        Ok(at_small_scale(
            v.gain,
            format!(
                "final held-out loss after {} steps × {} tokens over {} seeds: AdamW (lr {:e}, {}) {:.3} [{}], Muon (lr {:e}, {}) {:.3} [{}]",
                r.header.budget.steps,
                r.header.budget.batch_size * r.header.budget.seq_len,
                v.adamw.len(),
                r.best_adamw_lr,
                bracket(r.adamw_bracketed),
                v.adamw_mean,
                fmt(&v.adamw),
                r.best_muon_lr,
                bracket(r.muon_bracketed),
                v.muon_mean,
                fmt(&v.muon)
            ),
            v.reproduced(),
            note,
            "the token-efficiency claim comes from runs of hundreds of millions of parameters and more over billions of tokens (Moonshot's Muon scaling study); a longer run of a larger model would settle it.",
        ))
    })
}

fn train_max_logit() -> Outcome {
    recorded(max_logit::ID, |r: &max_logit::MaxLogitResults| {
        let v = max_logit::verdict(r)?;
        let runs: Vec<String> = r
            .runs
            .iter()
            .enumerate()
            .map(|(i, run)| {
                format!(
                    "{}: {:.1} → {:.1} (peak {:.1})",
                    run.name, v.first[i], v.last[i], v.peak[i]
                )
            })
            .collect();
        let chapter7 = if v.grad_clip_grows {
            "Gradient clipping alone let the logit grow too, as chapter 7's toy claim opt.clip_logits says.".to_string()
        } else {
            format!(
                "Gradient clipping alone: {:.1} → {:.1} ({:.2}× against {:.2}× unclipped), slower but still rising; without a doubling on either run this cannot settle chapter 7's toy claim opt.clip_logits.",
                v.first[1],
                v.last[1],
                v.last[1] / v.first[1],
                v.last[0] / v.first[0]
            )
        };
        let main = match (v.grows, v.bounded) {
            (true, true) => format!(
                "As the text says: unclipped, the max logit grew {:.1}×; QK-clip held it at τ = {} (peak {:.1}).",
                v.last[0] / v.first[0],
                max_logit::TAU,
                v.peak[2]
            ),
            (false, _) => format!(
                "The max logit did not double at lr {:e} without clipping ({:.1} → {:.1}), and it never reached τ = {}, so QK-clip never acted. With Qwen3's q/k RMSNorm a logit is at most √head_dim × max|γ_q| × max|γ_k| (4 at the initial gains), so it can only grow as fast as the norm gains do.",
                max_logit::LR,
                v.first[0],
                v.last[0],
                max_logit::TAU
            ),
            (true, false) => format!(
                "The logit grew ({:.1}×), but QK-clip was not shown to bound it: unclipped peak {:.1}, QK-clip peak {:.1}, τ = {}.",
                v.last[0] / v.first[0],
                v.peak[0],
                v.peak[2],
                max_logit::TAU
            ),
        };
        Ok(at_small_scale(
            v.last[0] / v.first[0],
            format!(
                "largest attention logit, first window → last 10% of {} steps at lr {:e} — {}",
                r.header.budget.steps,
                max_logit::LR,
                runs.join("; ")
            ),
            v.reproduced(),
            format!("{main} {chapter7}"),
            "exploding attention logits are reported in large-scale training (Kimi K2's QK-clip over trillions of tokens, ViT-22B); a model this size with q/k norms reaches no such logits, and a run at that scale would settle it.",
        ))
    })
}

fn train_glitch_decay() -> Outcome {
    recorded(glitch::ID, |r: &glitch::GlitchResults| {
        let v = glitch::verdict(r)?;
        let runs: Vec<String> = r
            .runs
            .iter()
            .map(|g| {
                format!(
                    "{}: absent {:.3} → {:.3} (× {:.3}; decay alone × {:.3}), present {:.3} → {:.3}",
                    g.run.name,
                    g.absent_initial_median,
                    g.absent_final_median,
                    g.absent_shrink,
                    g.predicted_shrink,
                    g.present_initial_median,
                    g.present_final_median
                )
            })
            .collect();
        let untied = r.runs.iter().find(|g| !g.run.tie_word_embeddings);
        let mechanism = untied.map_or(String::new(), |g| {
            format!(
                " With no gradient, the untied absent rows shrank × {:.3} where weight decay alone predicts × {:.3}: that is tok.init_norm's mechanism, and at this run's lr·λ a row needs about {:.0} steps to fall from norm 1.2 to 0.015.",
                g.absent_shrink,
                g.predicted_shrink,
                (1.2f64 / 0.015).ln()
                    / -(f64::from(g.predicted_shrink).ln() / g.run.steps_done.max(1) as f64)
            )
        });
        let note = if v.reproduced() {
            format!(
                "As the text says, on the untied model absent tokens end with median norm {:.2}× the present tokens'.{mechanism}",
                v.ratio
            )
        } else {
            format!(
                "Not tiny after this run: on the untied model absent tokens end at {:.2}× the present tokens' median norm (tiny means ≤ {}× and shrunk), tied {:.2}× (the tied head's softmax pushes every absent row and Adam normalises the push, so those rows grow like the rest).{mechanism}",
                v.ratio,
                glitch::TINY_RATIO,
                v.tied_ratio
            )
        };
        Ok(at_small_scale(
            v.ratio,
            format!(
                "median input-embedding norm of the {} absent vs {} present ordinary tokens after {} steps — {}",
                r.absent_tokens,
                r.ordinary_tokens - r.absent_tokens,
                r.header.budget.steps,
                runs.join("; ")
            ),
            v.reproduced(),
            note,
            "the tiny norms of glitch tokens are measured on released models trained with weight decay over trillions of tokens; at this run's steps weight decay has not had time to shrink absent rows that far, and a released checkpoint's embedding table (anatomy glitch --model) would settle it.",
        ))
    })
}

pub const ENTRIES: &[Entry] = &[
    Entry {
        id: "train.collapse",
        section: "S0 5.4 / S1 Q4",
        statement: "S0 5.4 / S1 Q4: without a balancing loss the router collapses onto few experts; the aux loss (and DeepSeek-V3's aux-free bias) keeps loads even",
        stated: "collapse vs even loads",
        compute: train_collapse,
    },
    Entry {
        id: "train.muon_efficiency",
        section: "S0 5.6.1",
        statement: "S0 5.6.1: Muon reaches a lower loss than AdamW at the same number of training tokens (\"token efficiency\")",
        stated: "Muon lower",
        compute: train_muon_efficiency,
    },
    Entry {
        id: "train.max_logit",
        section: "S0 5.6.3",
        statement: "S0 5.6.3: the max attention logit grows during training (\"max logits exploding\"); clipping (QK-clip) keeps it bounded",
        stated: "growth; bounded",
        compute: train_max_logit,
    },
    Entry {
        id: "train.glitch_decay",
        section: "S0 5.3.2",
        statement: "S0 5.3.2: rows of tokens absent from the model's training data end with tiny embedding norms (tokenizer trained on other data): their norms after training vs present tokens'",
        stated: "tiny norms",
        compute: train_glitch_decay,
    },
];
