//! The claims registry: every checkable number of the two source texts
//! (`shared/claims.md`), computed from the library and compared with what the text says.
//!
//! Each [`Entry`] names the claim (its stable id), where the text makes it, what the text
//! states, and a function that computes the value by calling the chapter modules. The
//! function also decides the status: `reproduced` when the computation agrees with the
//! text within the text's own precision, `erratum` when it does not (the note says what is
//! true), `not-shown` when a claim about large trained models was looked for on a model we
//! can run and not seen (the note names the scale the claim is about and what would settle
//! it), `needs-data` when only data that cannot ship would settle it.
//! `tests/claims.rs` pins every status and value; `anatomy tour` prints the table; the
//! book's appendix is generated from [`markdown_table`].
//!
//! One file per chapter holds that chapter's entries (`position.rs`, `long_context.rs`,
//! …); [`ENTRIES`] lists the chapters' slices in catalogue order.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Whether the text's statement survives the computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Reproduced,
    Erratum,
    /// Looked for on the models we can run and not seen; the claim is about a scale we do
    /// not reach, so absence here cannot make it wrong.
    NotShown,
    NeedsData,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Reproduced => "reproduced",
            Status::Erratum => "erratum",
            Status::NotShown => "not-shown",
            Status::NeedsData => "needs-data",
        }
    }
}

/// What a claim's computation produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The headline number, when there is one (tests pin it).
    pub value: Option<f64>,
    /// The computed result as shown in the table.
    pub computed: String,
    pub status: Status,
    /// One sentence: why the status, and what is true when the text is wrong.
    pub note: String,
}

/// One catalogue entry.
pub struct Entry {
    pub id: &'static str,
    /// Where the text says it: "S0 5.1.5" (main chapter) or "S1 §2" (overview).
    pub section: &'static str,
    pub statement: &'static str,
    pub stated: &'static str,
    pub compute: fn() -> Outcome,
}

/// A computed claim, as `anatomy tour --json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct Claim {
    pub id: &'static str,
    pub section: &'static str,
    pub status: Status,
    pub stated: &'static str,
    pub computed: String,
    pub note: String,
    #[serde(skip)]
    pub statement: &'static str,
    #[serde(skip)]
    pub value: Option<f64>,
}

/// Where one claim's computed value is kept once it exists.
type Slot = Arc<OnceLock<Claim>>;

impl Entry {
    /// The claim, computed on the first call in this process and cloned afterwards: a
    /// computation reads only the library and the files beside it, so a second run could only
    /// repeat it (the test binaries ask for the whole registry several times).
    pub fn evaluate(&self) -> Claim {
        static DONE: Mutex<BTreeMap<&str, Slot>> = Mutex::new(BTreeMap::new());
        let cell = {
            let mut done = DONE.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(done.entry(self.id).or_default())
        };
        // Outside the map's lock, so different claims compute at once; callers of the same
        // claim wait for the first.
        cell.get_or_init(|| self.compute_now()).clone()
    }

    fn compute_now(&self) -> Claim {
        let o = (self.compute)();
        Claim {
            id: self.id,
            section: self.section,
            status: o.status,
            stated: self.stated,
            computed: o.computed,
            note: o.note,
            statement: self.statement,
            value: o.value,
        }
    }
}

/// Every claim, computed, in catalogue order.
pub fn all() -> Vec<Claim> {
    entries().map(Entry::evaluate).collect()
}

/// Every entry, in catalogue order.
pub fn entries() -> impl Iterator<Item = &'static Entry> {
    ENTRIES.iter().flat_map(|chapter| chapter.iter())
}

/// One claim by id, computed.
pub fn find(id: &str) -> Option<Claim> {
    entries().find(|e| e.id == id).map(Entry::evaluate)
}

/// The claims table in Markdown (the book's appendix is this text, checked by a test).
pub fn markdown_table(claims: &[Claim]) -> String {
    // Pipes would split cells; angle brackets (`<think>`) would be read as HTML tags.
    let esc = |s: &str| {
        s.replace('|', "\\|")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('\n', " ")
    };
    let mut out = String::from(
        "| id | section | status | stated | computed | note |\n|---|---|---|---|---|---|\n",
    );
    for c in claims {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            c.id,
            c.section,
            c.status.as_str(),
            esc(c.stated),
            esc(&c.computed),
            esc(&c.note)
        ));
    }
    out
}

/// The claims table as plain text for a terminal: one block per claim.
pub fn text_table(claims: &[Claim]) -> String {
    let mut out = String::new();
    for c in claims {
        out.push_str(&format!(
            "{:<32} {:<11} {}\n{:<4} stated:   {}\n{:<4} computed: {}\n{:<4} {}\n\n",
            c.id,
            c.status.as_str(),
            c.section,
            "",
            c.stated,
            "",
            c.computed,
            "",
            c.note
        ));
    }
    out
}

/// One line: how many claims have each status (the tour's last line).
pub fn summary_line(claims: &[Claim]) -> String {
    let count = |s: Status| claims.iter().filter(|c| c.status == s).count();
    format!(
        "{} claims: {} reproduced, {} erratum, {} not-shown, {} needs-data",
        claims.len(),
        count(Status::Reproduced),
        count(Status::Erratum),
        count(Status::NotShown),
        count(Status::NeedsData)
    )
}

pub(crate) fn outcome(value: f64, computed: String, ok: bool, note: impl Into<String>) -> Outcome {
    Outcome {
        value: Some(value),
        computed,
        status: if ok {
            Status::Reproduced
        } else {
            Status::Erratum
        },
        note: note.into(),
    }
}

/// A claim about trained language models judged on a model small enough to train or run
/// here: seeing the effect reproduces it, but not seeing it cannot refute a statement about
/// models thousands of times larger, so the status is then not-shown and the note ends with
/// `settle`, the scale the claim is about and what would decide it.
pub(crate) fn at_small_scale(
    value: f64,
    computed: String,
    shown: bool,
    note: impl Into<String>,
    settle: &str,
) -> Outcome {
    let note = note.into();
    Outcome {
        value: Some(value),
        computed,
        status: if shown {
            Status::Reproduced
        } else {
            Status::NotShown
        },
        note: if shown {
            note
        } else {
            format!("{note} Not shown at this scale: {settle}")
        },
    }
}

/// What a claim measured on the bundled trained model says when that model (or one of its
/// reference files) cannot be read.
pub(crate) fn trained_model_missing(e: &crate::Error) -> Outcome {
    Outcome {
        value: None,
        computed: format!("not measured: {e}"),
        status: Status::NeedsData,
        note: "Needs the model trained here (data/anatomy-moe/, made by scripts/train-bundled.sh; its references by scripts/gen_anatomy_moe_checks.py).".into(),
    }
}

mod chat;
mod long_context;
mod moe;
mod optim;
mod position;
mod quant;
mod qwen3;
pub mod real;
pub mod real_extrapolation;
pub mod real_kl;
mod tokenizer;
mod train_context;
mod train_dynamics;

/// The chapters' entries, in catalogue order.
pub const ENTRIES: &[&[Entry]] = &[
    position::ENTRIES,
    long_context::ENTRIES,
    tokenizer::ENTRIES,
    moe::ENTRIES,
    qwen3::ENTRIES,
    optim::ENTRIES,
    chat::ENTRIES,
    quant::ENTRIES,
    train_dynamics::ENTRIES,
    train_context::ENTRIES,
    real::ENTRIES,
    real_extrapolation::ENTRIES,
    real_kl::ENTRIES,
];

/// Seeded N(0, 1) vector of length `n` (inputs of the numeric checks).
pub(crate) fn seeded_vec(n: usize, seed: u64) -> Vec<f32> {
    crate::rand::random_tokens(1, n, seed)
        .into_raw_vec_and_offset()
        .0
}

pub(crate) fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}
