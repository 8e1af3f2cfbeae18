//! Chapter 13.1 — `train.glitch_decay` (source S0 5.3.2; chapter 4's glitch screens): the
//! Qwen tokenizer was trained on other text than this corpus, so most of its tokens never
//! occur here. After training under AdamW's decoupled weight decay, how do the input-
//! embedding norms of those absent tokens compare with those of tokens present?
//!
//! Two runs from the same seed: the default model, whose LM head is the embedding (tied:
//! the softmax pushes every absent row too), and an untied copy, where an absent token's
//! input row gets no gradient at all and only weight decay moves it — the mechanism
//! `tok.init_norm` proposes, p ← p·(1 − lr·λ) each step, seen on its own. For each: the
//! rows' norms before and after, the decay that mechanism predicts, chapter 4's norm
//! screen, and its repetition test on the trained model.
//!
//! The rule (fixed before any run was recorded), on the untied run: absent rows end with
//! *tiny* norms when their median norm is ≤ 0.5× the present rows' median and below their
//! own initial median.

use super::{Budget, Header, Keep, RunRecord, Setup, header, train_run};
use crate::error::{Error, Result};
use crate::kernels::Matrix;
use crate::tokenizer::{Tokenizer, glitch};
use crate::train::experiments::ExperimentOptions;
use crate::train::params::Params;
use serde::{Deserialize, Serialize};

pub const ID: &str = "train.glitch_decay";
pub const STEPS: u64 = 200;
pub const TINY_RATIO: f64 = 0.5;
/// Rows the norm screen keeps.
pub const SCREEN_K: usize = 1000;
/// log10(norm) histogram: bins over [LO, HI).
pub const HIST_BINS: usize = 60;
pub const HIST_LO: f32 = -2.5;
pub const HIST_HI: f32 = 1.5;
/// Repetition-test candidates per class and the tokens generated for each.
const CANDIDATES: usize = 4;
const NEW_TOKENS: usize = 8;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GlitchResults {
    pub header: Header,
    /// Ordinary tokens (the BPE vocabulary, no added tokens, no padding rows).
    pub ordinary_tokens: usize,
    /// Of them, the ones that never occur in the training split.
    pub absent_tokens: usize,
    pub runs: Vec<GlitchRun>,
}

/// One run and what was measured on its embedding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GlitchRun {
    /// `initial_probe` and each evaluation's `probe`: [median absent, median present].
    pub run: RunRecord,
    pub absent_initial_median: f32,
    pub present_initial_median: f32,
    pub absent_final_median: f32,
    pub present_final_median: f32,
    /// Median over absent rows of final ÷ initial norm.
    pub absent_shrink: f32,
    /// Π (1 − lr_t·λ) over the steps: what weight decay alone does to a row.
    pub predicted_shrink: f32,
    /// log10(norm) histograms of the final rows ([`HIST_BINS`] bins over
    /// [`HIST_LO`]..[`HIST_HI`], values outside clamped to the end bins).
    pub hist_absent: Vec<usize>,
    pub hist_present: Vec<usize>,
    /// Chapter 4's norm screen: of the [`SCREEN_K`] smallest-norm rows, how many are
    /// absent tokens and how many decode to several Chinese characters.
    pub screen_absent: usize,
    pub screen_cjk: usize,
    pub repetition: Vec<RepetitionRow>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RepetitionRow {
    pub id: u32,
    pub token: String,
    pub absent: bool,
    pub answer: String,
    pub repeated: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// Untied run: median absent ÷ median present norm at the end.
    pub ratio: f64,
    pub shrank: bool,
    /// The same ratio in the tied run.
    pub tied_ratio: f64,
}

impl Verdict {
    pub fn reproduced(&self) -> bool {
        self.ratio <= TINY_RATIO && self.shrank
    }
}

/// Applies the rule of this module: the untied run decides.
pub fn verdict(r: &GlitchResults) -> Result<Verdict> {
    let find = |tied: bool| {
        r.runs
            .iter()
            .find(|g| g.run.tie_word_embeddings == tied)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{ID}: results.json has no {} run",
                    if tied { "tied" } else { "untied" }
                ))
            })
    };
    let (untied, tied) = (find(false)?, find(true)?);
    let ratio = |g: &GlitchRun| f64::from(g.absent_final_median / g.present_final_median);
    Ok(Verdict {
        ratio: ratio(untied),
        shrank: untied.absent_final_median < untied.absent_initial_median,
        tied_ratio: ratio(tied),
    })
}

fn median(mut xs: Vec<f32>) -> f32 {
    if xs.is_empty() {
        return f32::NAN;
    }
    xs.sort_by(f32::total_cmp);
    xs[xs.len() / 2]
}

/// The input embedding's row norms.
fn embed_norms(p: &Params) -> Result<Vec<f32>> {
    let e = p
        .get("model.embed_tokens.weight")
        .ok_or_else(|| Error::Invalid(format!("{ID}: the model has no embed_tokens")))?;
    let (rows, cols) = (e.shape[0], e.shape[1]);
    Ok(glitch::row_norms(&Matrix::f32(&e.data, rows, cols)))
}

/// Which ordinary tokens occur in the training split (index = id).
fn presence(tok: &Tokenizer, train: &[u32]) -> Vec<bool> {
    let mut present = vec![false; tok.vocab.len()];
    for &t in train {
        if let Some(p) = present.get_mut(t as usize) {
            *p = true;
        }
    }
    present
}

fn split_norms(norms: &[f32], present: &[bool]) -> (Vec<f32>, Vec<f32>) {
    let (mut absent, mut here) = (Vec::new(), Vec::new());
    for (&n, &p) in norms.iter().zip(present) {
        if p { here.push(n) } else { absent.push(n) }
    }
    (absent, here)
}

fn histogram(norms: &[f32]) -> Vec<usize> {
    let mut h = vec![0usize; HIST_BINS];
    let width = (HIST_HI - HIST_LO) / HIST_BINS as f32;
    for &n in norms {
        let x = (n.max(1e-30).log10() - HIST_LO) / width;
        h[(x.max(0.0) as usize).min(HIST_BINS - 1)] += 1;
    }
    h
}

/// Greedy continuation of `prompt` by `new` tokens (stops at `<|im_end|>`).
fn greedy(p: &Params, tok: &Tokenizer, prompt: &[u32], new: usize) -> Result<Vec<u32>> {
    let stop = tok.added.id_of("<|im_end|>");
    let v = p.config.vocab_size;
    let mut ids = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..new {
        let logits = crate::train::backward::logits(p, &ids)?;
        let last = &logits[logits.len() - v..];
        let next = last
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32);
        if Some(next) == stop {
            break;
        }
        ids.push(next);
        out.push(next);
    }
    Ok(out)
}

/// Measures one trained model.
fn measure(
    setup: &Setup,
    run: RunRecord,
    initial: &[f32],
    trained: &Params,
    present: &[bool],
    frequent: &[u32],
    short: bool,
) -> Result<GlitchRun> {
    let n = present.len();
    let norms = embed_norms(trained)?;
    let (absent_init, present_init) = split_norms(&initial[..n], present);
    let (absent_final, present_final) = split_norms(&norms[..n], present);
    let shrink: Vec<f32> = (0..n)
        .filter(|&i| !present[i])
        .map(|i| norms[i] / initial[i])
        .collect();
    let o = &run.options;
    let schedule = o.schedule()?;
    let predicted: f64 = (0..run.steps_done)
        .map(|t| 1.0 - o.adamw_lr * schedule.factor(t) * o.weight_decay)
        .product();
    let tok = &setup.tok;
    let e = trained
        .get("model.embed_tokens.weight")
        .ok_or_else(|| Error::Invalid(format!("{ID}: the model has no embed_tokens")))?;
    let ordinary = Matrix::f32(&e.data[..n * e.shape[1]], n, e.shape[1]);
    let screen = glitch::norm_screen(&ordinary, SCREEN_K.min(n), Some(tok));
    let screen_absent = screen
        .smallest
        .iter()
        .filter(|r| !present[r.id as usize])
        .count();
    let per_class = if short { 1 } else { CANDIDATES };
    let new = if short { 2 } else { NEW_TOKENS };
    let absent_ids: Vec<u32> = screen
        .cjk
        .iter()
        .filter(|r| !present[r.id as usize])
        .map(|r| r.id)
        .take(per_class)
        .collect();
    let ids: Vec<u32> = absent_ids
        .iter()
        .chain(frequent.iter().take(per_class))
        .copied()
        .collect();
    let repetition =
        glitch::repetition_test(tok, &ids, |prompt| greedy(trained, tok, prompt, new))?
            .into_iter()
            .map(|r| RepetitionRow {
                absent: !present[r.id as usize],
                id: r.id,
                token: r.token,
                answer: r.answer,
                repeated: r.repeated,
            })
            .collect();
    Ok(GlitchRun {
        run,
        absent_initial_median: median(absent_init),
        present_initial_median: median(present_init),
        hist_absent: histogram(&absent_final),
        hist_present: histogram(&present_final),
        absent_final_median: median(absent_final),
        present_final_median: median(present_final),
        absent_shrink: median(shrink),
        predicted_shrink: predicted as f32,
        screen_absent,
        screen_cjk: screen.cjk.len(),
        repetition,
    })
}

/// The most frequent multi-character Chinese tokens of the training split.
fn frequent_cjk(tok: &Tokenizer, train: &[u32], n: usize) -> Vec<u32> {
    let mut counts = vec![0u64; tok.vocab.len()];
    for &t in train {
        if let Some(c) = counts.get_mut(t as usize) {
            *c += 1;
        }
    }
    let mut ids: Vec<u32> = (0..counts.len() as u32)
        .filter(|&i| counts[i as usize] > 0)
        .filter(|&i| tok.decode(&[i]).is_ok_and(|s| glitch::is_multichar_cjk(&s)))
        .collect();
    ids.sort_by(|a, b| counts[*b as usize].cmp(&counts[*a as usize]).then(a.cmp(b)));
    ids.truncate(n);
    ids
}

pub fn run(opts: &ExperimentOptions) -> Result<String> {
    let start = std::time::Instant::now();
    let setup = Setup::load(opts)?;
    let budget = Budget::new(STEPS, opts.short);
    let mut header = header(ID, opts, &setup, budget);
    let present = presence(&setup.tok, &setup.corpus.train);
    let absent_tokens = present.iter().filter(|&&p| !p).count();
    let frequent = frequent_cjk(&setup.tok, &setup.corpus.train, CANDIDATES);
    let probe = |p: &Params| -> Vec<f32> {
        embed_norms(p).map_or_else(
            |_| Vec::new(),
            |norms| {
                let (a, h) = split_norms(&norms[..present.len()], &present);
                vec![median(a), median(h)]
            },
        )
    };
    let keep = Keep {
        expert_counts: false,
        probe: Some(&probe),
        progress: !opts.short,
    };
    let mut runs = Vec::new();
    for tied in [true, false] {
        let mut config = setup.config.clone();
        config.tie_word_embeddings = tied;
        let options = budget.options(0);
        let params = Params::init(&config, options.seed)?;
        let initial = embed_norms(&params)?;
        let name = if tied {
            "tied embeddings"
        } else {
            "untied embeddings"
        };
        let (record, state) = train_run(&setup, name, params, options, budget.log_every, &keep)?;
        runs.push(measure(
            &setup,
            record,
            &initial,
            &state.params,
            &present,
            &frequent,
            opts.short,
        )?);
    }
    header.wall_s = start.elapsed().as_secs_f64();
    let results = GlitchResults {
        header,
        ordinary_tokens: present.len(),
        absent_tokens,
        runs,
    };
    let path = super::write_results(&opts.out, &results)?;
    let mut text = format!(
        "{absent_tokens} of {} ordinary tokens never occur in the training split\n",
        present.len()
    );
    for g in &results.runs {
        let repeated = |absent: bool| {
            let rows: Vec<_> = g.repetition.iter().filter(|r| r.absent == absent).collect();
            format!(
                "{}/{}",
                rows.iter().filter(|r| r.repeated).count(),
                rows.len()
            )
        };
        text.push_str(&format!(
            "{}: median norm absent {:.4} → {:.4} (× {:.3}; weight decay alone predicts × {:.3}), present {:.4} → {:.4}; \
             {} of the {SCREEN_K} smallest rows absent; repeated: absent {}, present {}\n",
            g.run.name,
            g.absent_initial_median,
            g.absent_final_median,
            g.absent_shrink,
            g.predicted_shrink,
            g.present_initial_median,
            g.present_final_median,
            g.screen_absent,
            repeated(true),
            repeated(false),
        ));
    }
    text.push_str(&format!("wrote {}\n", path.display()));
    Ok(text)
}
