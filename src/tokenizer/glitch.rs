//! Glitch tokens (source 5.3.2–5.3.4): tokens the tokenizer knows but the model never
//! learned, because the tokenizer's training text had them and the model's did not.
//!
//! Three screens, as in the text, plus one from the literature:
//! * [`literal_scan`] — the text's method 2: tokens whose decoded string is longer than
//!   20 characters and has no `<|` (rulers, whitespace runs, long identifiers);
//! * [`norm_screen`] — method 1: rows of the input embedding with the smallest L2 norm,
//!   and the multi-character Chinese tokens among them (a row that never received a
//!   gradient keeps its small initial norm);
//! * [`unembedding_indicator`] — Land & Bartolo (2024, "Fishing for Magikarp"): cosine
//!   distance of each unembedding row, with the first principal component removed, to the
//!   mean row of tokens known to be unused; under-trained rows sit close to that mean;
//! * [`repetition_prompt_ids`] — method 3, the "please repeat" test, as a harness that
//!   any generator can run.
//!
//! Claims: `tok.glitch_ids`, `tok.literal_scan`, `tok.norm_scan`, `tok.glitch_norms`.

use super::Tokenizer;
use crate::error::{CheckpointProblem, Error, Result};
use crate::kernels::{Matrix, dot};
use rayon::prelude::*;
use serde::Serialize;

/// The text's table (5.3.2): id, token, L2 norm in Qwen2.5-7B-Instruct, guessed origin.
pub const GLITCH_TABLE: &[(u32, &str, f32, &str)] = &[
    (117332, "法战组合", 0.0150, "private game-server sites"),
    (115984, "魔龙令牌", 0.0213, "game item name"),
    (115992, "鸟成长记", 0.0263, "game related"),
    (118326, "凡本网注", 0.0295, "news-site copyright notice"),
    (109540, "早餐加盟", 0.0899, "franchise advertising"),
    (114068, "搜狐首页", 0.1211, "portal home page"),
];

/// The text's literal-scan threshold: more than this many characters.
pub const LITERAL_MIN_CHARS: usize = 20;

/// What a long token looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LiteralKind {
    /// Only whitespace (indentation, blank-line runs).
    Whitespace,
    /// One character repeated (`****…`, `====…`), possibly after a space or before newlines.
    Repeated,
    /// Other punctuation runs: comment rulers such as `//----…`.
    Ruler,
    /// Anything with letters or digits: long identifiers and words.
    Word,
}

/// One token found by the literal scan.
#[derive(Clone, Debug, Serialize)]
pub struct LiteralHit {
    pub id: u32,
    pub text: String,
    pub chars: usize,
    pub kind: LiteralKind,
}

// ANCHOR: literal_scan
/// The literal scan: every id whose decoded text (invalid UTF-8 shown as U+FFFD, as
/// `tokenizer.decode([id])` shows it) has more than `min_chars` characters and no `<|`.
pub fn literal_scan(tok: &Tokenizer, min_chars: usize) -> Vec<LiteralHit> {
    (0..tok.n_ids() as u32)
        .filter_map(|id| {
            let bytes = tok.token_bytes(id).ok()?;
            let text = String::from_utf8_lossy(bytes);
            let chars = text.chars().count();
            (chars > min_chars && !text.contains("<|")).then(|| LiteralHit {
                id,
                kind: literal_kind(&text),
                text: text.into_owned(),
                chars,
            })
        })
        .collect()
}
// ANCHOR_END: literal_scan

fn literal_kind(s: &str) -> LiteralKind {
    let t = s.trim();
    if t.is_empty() {
        return LiteralKind::Whitespace;
    }
    if t.chars().any(char::is_alphanumeric) {
        return LiteralKind::Word;
    }
    let first = t.chars().next().unwrap_or(' ');
    if t.chars().all(|c| c == first) {
        LiteralKind::Repeated
    } else {
        LiteralKind::Ruler
    }
}

/// One row of the text's glitch table checked against a vocabulary.
#[derive(Clone, Debug, Serialize)]
pub struct IdCheck {
    pub id: u32,
    pub expected: &'static str,
    /// What the vocabulary decodes the id to (`None` if the id is not in it).
    pub actual: Option<String>,
    pub ok: bool,
}

/// Decodes each id of [`GLITCH_TABLE`] and compares it with the text's token.
pub fn check_glitch_ids(tok: &Tokenizer) -> Vec<IdCheck> {
    GLITCH_TABLE
        .iter()
        .map(|&(id, expected, _, _)| {
            let actual = tok.decode(&[id]).ok();
            IdCheck {
                id,
                expected,
                ok: actual.as_deref() == Some(expected),
                actual,
            }
        })
        .collect()
}

/// Number of characters in the text's Chinese range `[\u4e00-\u9fa5]`.
pub fn cjk_chars(s: &str) -> usize {
    s.chars()
        .filter(|c| ('\u{4e00}'..='\u{9fa5}').contains(c))
        .count()
}

/// The text's filter: more than one character of the Chinese range.
pub fn is_multichar_cjk(s: &str) -> bool {
    cjk_chars(s) > 1
}

// ANCHOR: row_norms
/// The L2 norm of every row (rows widened to f32 one at a time; rayon over row blocks).
pub fn row_norms(m: &Matrix) -> Vec<f32> {
    let mut norms = vec![0.0f32; m.rows];
    norms
        .par_chunks_mut(1024)
        .enumerate()
        .for_each(|(block, out)| {
            let mut row = vec![0.0f32; m.cols];
            for (i, n) in out.iter_mut().enumerate() {
                m.row_into(block * 1024 + i, &mut row);
                *n = dot(&row, &row).sqrt();
            }
        });
    norms
}
// ANCHOR_END: row_norms

/// One screened row: id, score (norm or distance) and decoded text if the id is a token.
#[derive(Clone, Debug, Serialize)]
pub struct ScreenRow {
    pub id: u32,
    pub score: f32,
    pub text: Option<String>,
}

/// The `k` rows with the smallest score, ascending (ties by id), decoded through `tok`.
pub fn smallest(scores: &[f32], k: usize, tok: Option<&Tokenizer>) -> Vec<ScreenRow> {
    let mut order: Vec<u32> = (0..scores.len() as u32).collect();
    order.sort_by(|&a, &b| {
        scores[a as usize]
            .total_cmp(&scores[b as usize])
            .then(a.cmp(&b))
    });
    order
        .into_iter()
        .take(k)
        .map(|id| ScreenRow {
            id,
            score: scores[id as usize],
            text: tok.and_then(|t| t.decode(&[id]).ok()),
        })
        .collect()
}

/// Result of the embedding-norm screen (the text's method 1).
#[derive(Clone, Debug, Serialize)]
pub struct NormScreen {
    pub rows: usize,
    pub cols: usize,
    /// The `k` smallest-norm rows.
    pub smallest: Vec<ScreenRow>,
    /// Those of them that decode to more than one Chinese character.
    pub cjk: Vec<ScreenRow>,
}

// ANCHOR: norm_screen
/// Method 1: sort the input embedding's rows by L2 norm, keep the `k` smallest, and list
/// the multi-character Chinese tokens among them.
pub fn norm_screen(embed: &Matrix, k: usize, tok: Option<&Tokenizer>) -> NormScreen {
    let smallest = smallest(&row_norms(embed), k, tok);
    let cjk = smallest
        .iter()
        .filter(|r| r.text.as_deref().is_some_and(is_multichar_cjk))
        .cloned()
        .collect();
    NormScreen {
        rows: embed.rows,
        cols: embed.cols,
        smallest,
        cjk,
    }
}
// ANCHOR_END: norm_screen

/// Mean row and first principal component (unit vector) of a matrix, by power iteration
/// on the centred rows: `v ← Σ_r ((u_r − μ)·v)(u_r − μ)`, normalised, from a fixed start.
pub fn first_principal_component(m: &Matrix, iters: usize) -> (Vec<f32>, Vec<f32>) {
    let (rows, cols) = (m.rows, m.cols);
    let sum_rows = |f: &(dyn Fn(&[f32], &mut [f64]) + Sync)| -> Vec<f64> {
        (0..rows)
            .into_par_iter()
            .fold(
                || (vec![0.0f32; cols], vec![0.0f64; cols]),
                |(mut row, mut acc), r| {
                    m.row_into(r, &mut row);
                    f(&row, &mut acc);
                    (row, acc)
                },
            )
            .map(|(_, acc)| acc)
            .reduce(
                || vec![0.0f64; cols],
                |a, b| a.iter().zip(&b).map(|(x, y)| x + y).collect(),
            )
    };
    let mean: Vec<f32> = sum_rows(&|row, acc| {
        for (a, &x) in acc.iter_mut().zip(row) {
            *a += x as f64;
        }
    })
    .iter()
    .map(|s| (s / rows.max(1) as f64) as f32)
    .collect();
    // A fixed, non-degenerate start: (1, 2, …, d) normalised.
    let mut v: Vec<f32> = (1..=cols).map(|i| i as f32).collect();
    normalize(&mut v);
    let mean_dot = |v: &[f32]| dot(&mean, v);
    for _ in 0..iters {
        let mv = mean_dot(&v);
        let vv = v.clone();
        let w = sum_rows(&|row, acc| {
            let s = (dot(row, &vv) - mv) as f64;
            for ((a, &x), &mu) in acc.iter_mut().zip(row).zip(&mean) {
                *a += s * (x - mu) as f64;
            }
        });
        let mut next: Vec<f32> = w.iter().map(|&x| x as f32).collect();
        if !normalize(&mut next) {
            break;
        }
        // The sign is arbitrary; keep it stable so convergence can be checked.
        if dot(&next, &v) < 0.0 {
            next.iter_mut().for_each(|x| *x = -*x);
        }
        let change = next
            .iter()
            .zip(&v)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        v = next;
        if change < 1e-7 {
            break;
        }
    }
    (mean, v)
}

fn normalize(v: &mut [f32]) -> bool {
    let n = dot(v, v).sqrt();
    if n > 0.0 && n.is_finite() {
        v.iter_mut().for_each(|x| *x /= n);
        true
    } else {
        false
    }
}

/// Land & Bartolo's unembedding indicator: remove the first principal component `c` from
/// every row (`u' = u − (u·c) c`), average the rows of the known-unused ids, and return
/// each row's cosine distance to that average. Small distance = looks like an unused token.
pub fn unembedding_indicator(unembed: &Matrix, unused: &[u32]) -> Result<Vec<f32>> {
    if unused.is_empty() {
        return Err(Error::Invalid(
            "the unembedding indicator needs at least one id known to be unused".into(),
        ));
    }
    if let Some(&bad) = unused.iter().find(|&&i| i as usize >= unembed.rows) {
        return Err(Error::Invalid(format!(
            "unused id {bad} is past the unembedding's {} rows",
            unembed.rows
        )));
    }
    // ANCHOR: magikarp
    let (_, c) = first_principal_component(unembed, 200);
    let cols = unembed.cols;
    let project = |r: usize, row: &mut [f32]| {
        unembed.row_into(r, row);
        let s = dot(row, &c);
        row.iter_mut().zip(&c).for_each(|(x, ci)| *x -= s * ci);
    };
    let mut reference = vec![0.0f32; cols];
    let mut row = vec![0.0f32; cols];
    for &i in unused {
        project(i as usize, &mut row);
        reference
            .iter_mut()
            .zip(&row)
            .for_each(|(a, x)| *a += x / unused.len() as f32);
    }
    let ref_norm = dot(&reference, &reference).sqrt();
    let mut out = vec![0.0f32; unembed.rows];
    out.par_chunks_mut(1024).enumerate().for_each(|(block, o)| {
        let mut row = vec![0.0f32; cols];
        for (i, d) in o.iter_mut().enumerate() {
            project(block * 1024 + i, &mut row);
            let denom = (dot(&row, &row).sqrt() * ref_norm).max(1e-6);
            *d = 1.0 - dot(&row, &reference) / denom;
        }
    });
    Ok(out)
    // ANCHOR_END: magikarp
}

// ANCHOR: repetition
/// The repetition test's prompt (method 3) in ChatML, as ids: the instruction, then the
/// candidate token's id itself (not its text re-encoded, which might merge differently),
/// then the assistant turn. A model that knows the token answers with it.
pub fn repetition_prompt_ids(tok: &Tokenizer, id: u32) -> Result<Vec<u32>> {
    tok.token_bytes(id)?;
    let mut ids = tok.encode(
        "<|im_start|>user\n请重复以下内容（Please repeat the following text exactly）：\n\n",
    )?;
    ids.push(id);
    ids.extend(tok.encode("<|im_end|>\n<|im_start|>assistant\n")?);
    Ok(ids)
}
// ANCHOR_END: repetition

/// One repetition test: the candidate, what the model said, whether it repeated it.
#[derive(Clone, Debug, Serialize)]
pub struct Repetition {
    pub id: u32,
    pub token: String,
    pub answer: String,
    pub repeated: bool,
}

/// Runs the repetition test for each id with `generate` (prompt ids → new ids).
/// A token counts as repeated when its text (trimmed) appears in the answer.
pub fn repetition_test(
    tok: &Tokenizer,
    ids: &[u32],
    mut generate: impl FnMut(&[u32]) -> Result<Vec<u32>>,
) -> Result<Vec<Repetition>> {
    ids.iter()
        .map(|&id| {
            let token = tok.decode(&[id])?;
            let answer = tok.decode(&generate(&repetition_prompt_ids(tok, id)?)?)?;
            let needle = token.trim();
            let repeated = !needle.is_empty() && answer.contains(needle);
            Ok(Repetition {
                id,
                token,
                answer,
                repeated,
            })
        })
        .collect()
}

/// Names under which checkpoints store the input embedding and the unembedding.
const EMBED_NAMES: &[&str] = &[
    "model.embed_tokens.weight",
    "embed_tokens.weight",
    "transformer.wte.weight",
];
const UNEMBED_NAMES: &[&str] = &["lm_head.weight"];

/// The screens of a checkpoint: embedding norms and the unembedding indicator.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointScreen {
    pub model: String,
    pub norms: NormScreen,
    /// Whether `lm_head.weight` was absent, so the embedding doubles as the unembedding.
    pub tied: bool,
    /// The ids used as "known unused" (rows the tokenizer has no token for, or given).
    pub unused_reference: usize,
    /// The `k` rows closest to the unused mean by the unembedding indicator (None if there
    /// is no known-unused row to compare with).
    pub indicator: Option<Vec<ScreenRow>>,
    /// How many of the `k` smallest-norm rows are also among the indicator's `k`.
    pub overlap: Option<usize>,
}

/// Runs [`norm_screen`] and [`unembedding_indicator`] over a safetensors checkpoint.
/// `unused` defaults to the rows past the tokenizer's ids (padding rows that no text can
/// produce); with none, the indicator is skipped.
pub fn screen_checkpoint(
    dir: &std::path::Path,
    tok: &Tokenizer,
    k: usize,
    unused: Option<Vec<u32>>,
) -> Result<CheckpointScreen> {
    let ckpt = crate::checkpoint::Checkpoint::open(dir)?;
    let find = |names: &'static [&'static str]| names.iter().copied().find(|n| ckpt.contains(n));
    let embed_name = find(EMBED_NAMES).ok_or_else(|| Error::Checkpoint {
        file: dir.to_path_buf(),
        tensor: None,
        problem: CheckpointProblem::NoneOf {
            what: "input embedding".into(),
            names: EMBED_NAMES.iter().map(|n| n.to_string()).collect(),
        },
    })?;
    let matrix = |name: &str| -> Result<Matrix<'_>> {
        let info = ckpt.info(name)?;
        let [rows, cols] = info.shape[..] else {
            return Err(Error::Checkpoint {
                file: ckpt.file_of(name)?.to_path_buf(),
                tensor: Some(name.to_string()),
                problem: CheckpointProblem::Rank {
                    found: info.shape.clone(),
                    expected: 2,
                },
            });
        };
        ckpt.matrix(name, rows, cols)
    };
    let embed = matrix(embed_name)?;
    let unembed_name = find(UNEMBED_NAMES);
    let unembed = unembed_name.map(matrix).transpose()?;
    let where_is = |name: &str| {
        let file = ckpt.file_of(name).map_or_else(
            |_| ckpt.dir().display().to_string(),
            |p| p.display().to_string(),
        );
        format!("{file}: tensor `{name}`")
    };
    let unembed_what = unembed_name.map(where_is);
    screen_matrices(
        &dir.display().to_string(),
        (&where_is(embed_name), &embed),
        unembed_what.as_deref().zip(unembed.as_ref()),
        tok,
        k,
        unused,
    )
}

/// The screens of an input embedding and (when the model has its own) an unembedding,
/// from wherever they were read: each comes with the words that name it in errors (file
/// and tensor). `model` names the model in the report.
pub fn screen_matrices(
    model: &str,
    (embed_what, embed): (&str, &Matrix),
    unembed: Option<(&str, &Matrix)>,
    tok: &Tokenizer,
    k: usize,
    unused: Option<Vec<u32>>,
) -> Result<CheckpointScreen> {
    // A NaN row would sort as "the smallest norm": refuse it, naming the row.
    finite_rows(embed_what, embed)?;
    let norms = norm_screen(embed, k, Some(tok));
    let tied = unembed.is_none();
    let unembed = match unembed {
        Some((what, m)) => {
            finite_rows(what, m)?;
            m
        }
        None => embed,
    };
    let unused = unused.unwrap_or_else(|| (tok.n_ids() as u32..unembed.rows as u32).collect());
    let indicator = if unused.is_empty() {
        None
    } else {
        Some(smallest(
            &unembedding_indicator(unembed, &unused)?,
            k,
            Some(tok),
        ))
    };
    let overlap = indicator.as_ref().map(|ind| {
        let set: std::collections::HashSet<u32> = norms.smallest.iter().map(|r| r.id).collect();
        ind.iter().filter(|r| set.contains(&r.id)).count()
    });
    Ok(CheckpointScreen {
        model: model.to_string(),
        norms,
        tied,
        unused_reference: unused.len(),
        indicator,
        overlap,
    })
}

/// The screens rank rows by numbers computed from every weight: one NaN or infinity makes
/// its row's score meaningless, so it is an error naming the tensor, row and column.
fn finite_rows(what: &str, m: &Matrix) -> Result<()> {
    match m.find_non_finite() {
        None => Ok(()),
        Some((r, c)) => Err(Error::NonFinite {
            what: what.to_string(),
            detail: format!("row {r}, column {c} is not finite (NaN or infinite)"),
        }),
    }
}

/// Everything `anatomy glitch` reports.
#[derive(Clone, Debug, Serialize)]
pub struct GlitchReport {
    pub vocab: String,
    pub n_ids: usize,
    pub literal_scan_count: usize,
    pub literal_scan: Vec<LiteralHit>,
    pub glitch_ids: Vec<IdCheck>,
    pub checkpoint: Option<CheckpointScreen>,
    /// The "please repeat" test, when it was run (it needs a model to generate with).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition: Option<Vec<Repetition>>,
}

/// The full report: literal scan and id table over the vocabulary, and the screens of
/// `model` if given.
pub fn report(
    tok: &Tokenizer,
    model: Option<&std::path::Path>,
    k: usize,
    unused: Option<Vec<u32>>,
) -> Result<GlitchReport> {
    let literal_scan = literal_scan(tok, LITERAL_MIN_CHARS);
    Ok(GlitchReport {
        vocab: tok.name.clone(),
        n_ids: tok.n_ids(),
        literal_scan_count: literal_scan.len(),
        literal_scan,
        glitch_ids: check_glitch_ids(tok),
        checkpoint: model
            .map(|m| screen_checkpoint(m, tok, k, unused))
            .transpose()?,
        repetition: None,
    })
}

/// The report as text for a terminal (`shown` rows per list; every repetition test).
pub fn text_report(r: &GlitchReport, shown: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let show = |t: &Option<String>| {
        t.as_deref()
            .map_or("<no token>".to_string(), |t| format!("{t:?}"))
    };
    let _ = writeln!(s, "vocabulary {} ({} ids)", r.vocab, r.n_ids);
    let _ = writeln!(
        s,
        "\nliteral scan (> {LITERAL_MIN_CHARS} chars, no \"<|\"): {} tokens",
        r.literal_scan_count
    );
    for kind in [
        LiteralKind::Whitespace,
        LiteralKind::Repeated,
        LiteralKind::Ruler,
        LiteralKind::Word,
    ] {
        let n = r.literal_scan.iter().filter(|h| h.kind == kind).count();
        let _ = writeln!(s, "  {kind:?}: {n}");
    }
    for h in r.literal_scan.iter().take(shown) {
        let _ = writeln!(s, "  {:>7} {:>4} chars {:?}", h.id, h.chars, h.text);
    }
    let _ = writeln!(s, "\nthe text's glitch ids:");
    for c in &r.glitch_ids {
        let _ = writeln!(
            s,
            "  {:>7} expected {}  vocabulary {}  {}",
            c.id,
            c.expected,
            show(&c.actual),
            if c.ok { "ok" } else { "MISMATCH" }
        );
    }
    if let Some(c) = &r.checkpoint {
        let _ = writeln!(
            s,
            "\ncheckpoint {} (embedding {} x {}{})",
            c.model,
            c.norms.rows,
            c.norms.cols,
            if c.tied { ", tied" } else { "" }
        );
        let _ = writeln!(s, "{} smallest L2 norms:", c.norms.smallest.len());
        for row in c.norms.smallest.iter().take(shown) {
            let _ = writeln!(s, "  {:>7} {:>9.4} {}", row.id, row.score, show(&row.text));
        }
        let _ = writeln!(
            s,
            "multi-character Chinese tokens among them: {}",
            c.norms.cjk.len()
        );
        for row in c.norms.cjk.iter().take(shown) {
            let _ = writeln!(s, "  {:>7} {:>9.4} {}", row.id, row.score, show(&row.text));
        }
        match &c.indicator {
            Some(ind) => {
                let _ = writeln!(
                    s,
                    "unembedding indicator (cosine distance to the mean of {} unused rows, first PC removed), smallest:",
                    c.unused_reference
                );
                for row in ind.iter().take(shown) {
                    let _ = writeln!(s, "  {:>7} {:>9.4} {}", row.id, row.score, show(&row.text));
                }
                if let Some(o) = c.overlap {
                    let _ = writeln!(s, "overlap with the smallest norms: {o} of {}", ind.len());
                }
            }
            None => {
                let _ = writeln!(
                    s,
                    "unembedding indicator skipped: no known-unused rows (pass --unused IDS)"
                );
            }
        }
    }
    for t in r.repetition.iter().flatten() {
        let verdict = if t.repeated {
            "repeated"
        } else {
            "NOT repeated"
        };
        let _ = writeln!(
            s,
            "repeat {:>7} {:?}: {verdict}; answer {:?}",
            t.id, t.token, t.answer
        );
    }
    s
}

/// The synthetic demonstration checkpoint (`data/synthetic-glitch/`, written by
/// scripts/gen_synthetic_glitch.py): a bigram model whose tokenizer saw web spam that its
/// training data did not.
pub fn synthetic_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/synthetic-glitch")
}

/// The rows of the synthetic checkpoint that its training never saw (`planted.json`).
pub fn synthetic_never_seen() -> Result<Vec<u32>> {
    let path = synthetic_dir().join("planted.json");
    let doc = crate::error::read_json(&path)?;
    doc.get("never_seen")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64().map(|x| x as u32))
                .collect()
        })
        .ok_or_else(|| {
            Error::field(
                path.display().to_string(),
                "never_seen",
                "missing or not a list",
            )
        })
}

/// Up to `n` ids for the repetition test from a report's checkpoint screen: the
/// multi-character Chinese tokens first, then the other smallest-norm rows that are tokens.
pub fn repetition_candidates(report: &GlitchReport, n: usize) -> Vec<u32> {
    let Some(c) = &report.checkpoint else {
        return Vec::new();
    };
    // `n` is a flag (`--repeat`): never more than there are candidates.
    let mut out: Vec<u32> = Vec::with_capacity(n.min(c.norms.cjk.len() + c.norms.smallest.len()));
    for r in c.norms.cjk.iter().chain(&c.norms.smallest) {
        if out.len() == n {
            break;
        }
        if r.text.is_some() && !out.contains(&r.id) {
            out.push(r.id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_cjk() {
        assert_eq!(literal_kind("      \n"), LiteralKind::Whitespace);
        assert_eq!(literal_kind(" ************"), LiteralKind::Repeated);
        assert_eq!(literal_kind("//-------\n"), LiteralKind::Ruler);
        assert_eq!(literal_kind(" UITableViewController"), LiteralKind::Word);
        assert!(is_multichar_cjk("法战组合"));
        assert!(!is_multichar_cjk("法a"));
        assert!(!is_multichar_cjk("ひらがな"));
    }

    #[test]
    fn principal_component_of_a_line() {
        // Points along (3, 4)/5 with small orthogonal noise: the PC is ±(0.6, 0.8).
        let data: Vec<f32> = (0..50)
            .flat_map(|i| {
                let t = i as f32 - 25.0;
                let e = if i % 2 == 0 { 0.01 } else { -0.01 };
                [0.6 * t - 0.8 * e + 1.0, 0.8 * t + 0.6 * e - 2.0]
            })
            .collect();
        let m = Matrix::f32(&data, 50, 2);
        let (mean, c) = first_principal_component(&m, 100);
        assert!(
            (mean[0] - 0.7).abs() < 1e-4 && (mean[1] + 2.4).abs() < 1e-4,
            "{mean:?}"
        );
        assert!(
            (c[0].abs() - 0.6).abs() < 1e-4 && (c[1].abs() - 0.8).abs() < 1e-4,
            "{c:?}"
        );
    }
}
