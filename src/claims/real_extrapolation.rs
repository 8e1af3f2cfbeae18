//! Inference-time length extrapolation on a real model (chapter 3): SmolLM2-135M-Instruct,
//! trained context L = 8192, read past L with direct extrapolation, PI, NTK-aware, dynamic
//! NTK and YaRN set at inference only (no fine-tune).
//!
//! They judge from `data/real/extrapolation-smollm2.json`, which
//! `scripts/gen_real_extrapolation.sh` measures with `anatomy perplexity`: per run (method,
//! factor, tokens) the mean per-token loss, its standard error and count in the position
//! buckets [0, L), [L, 2L), [2L, 4L). A gap counts when it exceeds [`MARGIN`] standard
//! errors of the difference (errors of independent positions; neighbouring losses are
//! correlated, so the margin is generous).

use super::{Entry, Outcome, Status};
use std::path::PathBuf;

/// Standard errors of a difference that a gap must exceed to count.
pub const MARGIN: f64 = 3.0;

/// The data file, relative to the crate.
pub const DATA: &str = "data/real/extrapolation-smollm2.json";

/// The methods in the order the figure and table show them: (CLI name, prose name).
pub const METHODS: &[(&str, &str)] = &[
    ("none", "direct"),
    ("linear", "PI"),
    ("ntk", "NTK-aware"),
    ("dynamic", "dynamic NTK"),
    ("yarn", "YaRN"),
];

/// One position bucket of one run.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Bucket {
    pub start: usize,
    pub end: usize,
    pub mean: f64,
    pub stderr: f64,
    pub count: usize,
}

/// One `anatomy perplexity` run.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Run {
    pub method: String,
    pub factor: f64,
    pub tokens: usize,
    pub trained_context: usize,
    pub seconds: f64,
    pub buckets: Vec<Bucket>,
}

/// The committed runs.
pub fn runs() -> crate::Result<Vec<Run>> {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), DATA].iter().collect();
    let doc = crate::error::read_json(&path)?;
    serde_json::from_value(doc["runs"].clone())
        .map_err(|e| crate::Error::field(DATA, "runs", e.to_string()))
}

/// The run of `method` on `tokens` tokens (any factor when `factor` is `None`).
pub fn find<'r>(
    runs: &'r [Run],
    method: &str,
    factor: Option<f64>,
    tokens: usize,
) -> Option<&'r Run> {
    runs.iter()
        .find(|r| r.method == method && r.tokens == tokens && factor.is_none_or(|f| r.factor == f))
}

impl Run {
    /// The bucket starting at position `start`.
    pub fn bucket(&self, start: usize) -> Option<&Bucket> {
        self.buckets.iter().find(|b| b.start == start)
    }
}

/// `a − b` and the standard error of the difference.
pub fn gap(a: &Bucket, b: &Bucket) -> (f64, f64) {
    (a.mean - b.mean, a.stderr.hypot(b.stderr))
}

fn needs(what: &str) -> Outcome {
    Outcome {
        value: None,
        computed: "not measured".into(),
        status: Status::NeedsData,
        note: format!(
            "{what} is not in {DATA}; measure it with scripts/gen_real_extrapolation.sh (needs scripts/get-real-models.sh)."
        ),
    }
}

fn judged(value: f64, computed: String, shown: bool, note: String, settle: &str) -> Outcome {
    super::at_small_scale(value, computed, shown, note, settle)
}

/// `real.direct_extrapolation`: no scaling, 2L tokens; loss in [L, 2L) against [0, L).
pub fn real_direct_extrapolation() -> Outcome {
    let Ok(runs) = runs() else {
        return needs(DATA);
    };
    let Some(l) = runs.first().map(|r| r.trained_context) else {
        return needs("a run");
    };
    let Some((inside, past)) =
        find(&runs, "none", None, 2 * l).and_then(|r| Some((r.bucket(0)?, r.bucket(l)?)))
    else {
        return needs("the direct run on 2L tokens");
    };
    let (d, se) = gap(past, inside);
    let shown = d > MARGIN * se;
    let four = find(&runs, "none", None, 4 * l).and_then(|r| r.bucket(2 * l));
    let four_text = match four {
        Some(b) => format!("; [2L, 4L) {:.3}", b.mean),
        None => "; 4L not measured".into(),
    };
    judged(
        d,
        format!(
            "loss [0, L) {:.3}, [L, 2L) {:.3} (+{d:.3} ± {se:.3} nats){four_text}",
            inside.mean, past.mean
        ),
        shown,
        format!(
            "SmolLM2-135M (L = {l}) on {} tokens of English text without scaling: the loss past L is {} the loss inside it (margin {MARGIN} standard errors).",
            2 * l,
            if shown {
                "clearly above"
            } else {
                "not clearly above"
            }
        ),
        "a model of 135M parameters read past its context; larger models fail the same way in the source's figures.",
    )
}

/// Every method's run at `k`·L tokens with factor `k` (direct: 1), and its loss in the
/// last doubling, [k/2·L, k·L), in [`METHODS`] order (missing runs skipped).
pub fn at_length(runs: &[Run], l: usize, k: usize) -> Vec<(&'static str, Bucket)> {
    METHODS
        .iter()
        .filter_map(|&(m, name)| {
            let f = if m == "none" { 1.0 } else { k as f64 };
            Some((
                name,
                find(runs, m, Some(f), k * l)?.bucket(k / 2 * l)?.clone(),
            ))
        })
        .collect()
}

/// The source's ordering at one length: whether PI is below direct, whether NTK-aware and
/// YaRN are below PI (each by [`MARGIN`] standard errors), and how far the better of
/// NTK-aware and YaRN is below direct; `None` when a run is missing.
fn ordering_holds(got: &[(&str, Bucket)]) -> Option<(bool, bool, f64)> {
    let get = |name: &str| got.iter().find(|(n, _)| *n == name).map(|(_, b)| b);
    let (direct, pi, ntk, yarn) = (get("direct")?, get("PI")?, get("NTK-aware")?, get("YaRN")?);
    let beats = |a: &Bucket, b: &Bucket| {
        let (d, se) = gap(b, a);
        d > MARGIN * se
    };
    Some((
        beats(pi, direct),
        beats(ntk, pi) && beats(yarn, pi),
        direct.mean - ntk.mean.min(yarn.mean),
    ))
}

/// `"direct 4.541, PI 3.315, …; lowest YaRN"`.
fn losses_text(got: &[(&str, Bucket)]) -> String {
    let best = got
        .iter()
        .min_by(|a, b| a.1.mean.total_cmp(&b.1.mean))
        .map_or("", |(n, _)| n);
    let table: Vec<String> = got
        .iter()
        .map(|(n, b)| format!("{n} {:.3}", b.mean))
        .collect();
    format!("{}; lowest {best}", table.join(", "))
}

/// `real.scaling_no_finetune`: at 2L (and at 4L when every run is measured), NTK-aware and
/// YaRN below PI below direct in the last doubling of the text.
pub fn real_scaling_no_finetune() -> Outcome {
    let Ok(runs) = runs() else {
        return needs(DATA);
    };
    let Some(l) = runs.first().map(|r| r.trained_context) else {
        return needs("a run");
    };
    let two = at_length(&runs, l, 2);
    let Some((pi_beats_direct, ntk_yarn_beat_pi, direct_minus_best)) = ordering_holds(&two) else {
        return needs("the 2× runs of direct, PI, NTK-aware and YaRN");
    };
    let four = at_length(&runs, l, 4);
    let (four_text, four_holds) = match ordering_holds(&four) {
        Some((p, n, _)) => (
            format!(
                " At 4L (factor 4), in [2L, 4L): {}; the ordering {}.",
                losses_text(&four),
                if p && n { "holds" } else { "does not hold" }
            ),
            p && n,
        ),
        None => (
            format!(
                " At 4L ({} tokens) not every one of direct, PI, NTK-aware and YaRN is measured.",
                4 * l
            ),
            true,
        ),
    };
    judged(
        direct_minus_best,
        format!("loss in [L, 2L) at 2L: {}", losses_text(&two)),
        pi_beats_direct && ntk_yarn_beat_pi && four_holds,
        format!(
            "SmolLM2-135M at 2L with each scaling set at inference (factor 2): PI {} direct, NTK-aware and YaRN {} PI (margin {MARGIN} standard errors).{four_text}",
            if pi_beats_direct {
                "below"
            } else {
                "not clearly below"
            },
            if ntk_yarn_beat_pi {
                "below"
            } else {
                "not both clearly below"
            },
        ),
        "the ordering is stated for larger models; a model of 135M parameters at 2L may order them otherwise.",
    )
}

/// `real.pi_short`: PI (factor 2 when measured, else the smallest factor run) against no
/// scaling on a text of L/4 tokens.
pub fn real_pi_short() -> Outcome {
    let Ok(runs) = runs() else {
        return needs(DATA);
    };
    let Some(l) = runs.first().map(|r| r.trained_context) else {
        return needs("a run");
    };
    let n = l / 4;
    let pi = runs
        .iter()
        .filter(|r| r.method == "linear" && r.tokens == n)
        .min_by(|a, b| a.factor.total_cmp(&b.factor));
    let (Some((factor, pi)), Some(direct)) = (
        pi.and_then(|r| Some((r.factor, r.bucket(0)?))),
        find(&runs, "none", None, n).and_then(|r| r.bucket(0)),
    ) else {
        return needs("the short runs (PI and no scaling on L/4 tokens)");
    };
    let others = runs
        .iter()
        .filter(|r| r.method == "linear" && r.tokens == n && r.factor != factor)
        .filter_map(|r| Some(format!(", PI ×{} {:.3}", r.factor, r.bucket(0)?.mean)))
        .collect::<String>();
    let (d, se) = gap(pi, direct);
    let shown = d > MARGIN * se;
    judged(
        d,
        format!(
            "loss on {n} tokens: none {:.3}, PI ×{factor} {:.3} ({d:+.3} ± {se:.3} nats){others}",
            direct.mean, pi.mean
        ),
        shown,
        format!(
            "SmolLM2-135M on {n} tokens (≤ L) with PI ×{factor} set at inference: {} without it (margin {MARGIN} standard errors).",
            if shown {
                "clearly worse than"
            } else {
                "not clearly worse than"
            }
        ),
        "a model of 135M parameters; the source reports the cost for larger ones.",
    )
}

/// Chapter 3's table (book/src/generated/real-extrapolation.md): every run's mean loss and
/// standard error per position bucket.
pub fn table_markdown() -> crate::Result<String> {
    use std::fmt::Write;
    let runs = runs()?;
    let l = runs.first().map_or(0, |r| r.trained_context);
    let labels = ["[0, L)", "[L, 2L)", "[2L, 4L)"];
    let mut s = format!(
        "| scaling at inference | factor | tokens | {} |\n|---|---|---|---|---|---|\n",
        labels.join(" | ")
    );
    let mut sorted: Vec<&Run> = runs.iter().collect();
    sorted.sort_by_key(|r| (r.tokens, METHODS.iter().position(|(m, _)| *m == r.method)));
    for r in sorted {
        let name = METHODS
            .iter()
            .find(|(m, _)| *m == r.method)
            .map_or(r.method.as_str(), |(_, n)| n);
        let cells: Vec<String> = [0, l, 2 * l]
            .iter()
            .map(|&start| match r.bucket(start) {
                Some(b) => format!("{:.3} ± {:.3}", b.mean, b.stderr),
                None => "—".into(),
            })
            .collect();
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} |",
            r.factor,
            r.tokens,
            cells.join(" | ")
        );
    }
    let _ = writeln!(
        s,
        "\nMean per-token loss (nats) ± its standard error, by position bucket; L = {l}."
    );
    Ok(s)
}

/// A toy-model verdict re-judged with the real evidence: the real model showing the effect
/// makes it reproduced; otherwise the toy's status stands. The note keeps both and says
/// what only a fine-tune would add.
pub(crate) fn with_real(toy: Outcome, real: Outcome, finetune: &str) -> Outcome {
    if real.status == Status::NeedsData {
        return toy;
    }
    let status = match (real.status, toy.status) {
        (Status::Reproduced, _) => Status::Reproduced,
        (_, s) => s,
    };
    Outcome {
        value: toy.value,
        computed: format!("{}; SmolLM2 at inference: {}", toy.computed, real.computed),
        status,
        note: format!(
            "Real model (SmolLM2-135M, no fine-tune): {} Trained toy: {} {finetune}",
            real.note, toy.note
        ),
    }
}

pub const ENTRIES: &[Entry] = &[
    Entry {
        id: "real.direct_extrapolation",
        section: "S0 5.2.1 / S1 §1",
        statement: "S0 5.2.1 / S1 §1: fed past its trained length without scaling, the model fails — per-token loss at 1×, 2×, 4× the trained context",
        stated: "fails",
        compute: real_direct_extrapolation,
    },
    Entry {
        id: "real.scaling_no_finetune",
        section: "S1 §2 table",
        statement: "S1 §2 table: PI, NTK-aware (免微调可用，但有上限), dynamic NTK and YaRN applied at inference only — loss at 2× and 4×, ordering",
        stated: "NTK/YaRN > PI > direct",
        compute: real_scaling_no_finetune,
    },
    Entry {
        id: "real.pi_short",
        section: "S1 troubleshooting",
        statement: "S1 troubleshooting: PI hurts short texts (loss at ≤ trained length with PI on, no fine-tune)",
        stated: "worse",
        compute: real_pi_short,
    },
];
