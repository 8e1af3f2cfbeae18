//! Chapter 4's figures (source S0 5.3): embedding norms of the synthetic checkpoint (glitch
//! tokens) and token lengths in Qwen's vocabulary.

use super::{Area, DrawResult, Key, TITLE, draw_legend, font, legend_on_top, line_key, plot};
use super::{mesh, px, tick};
use plotters::prelude::*;

/// Source 5.3.4 on the synthetic checkpoint: L2 norms of the embedding rows, log y; the
/// rows training never saw (red) sit in a spike at their initial norm, far left.
pub(super) fn tok_embedding_norms(root: &Area) -> DrawResult {
    use crate::tokenizer::glitch;
    root.fill(&WHITE)?;
    let dir = glitch::synthetic_dir();
    let ckpt = crate::checkpoint::Checkpoint::open(&dir)?;
    let info = ckpt.info("model.embed_tokens.weight")?;
    let embed = ckpt.matrix("model.embed_tokens.weight", info.shape[0], info.shape[1])?;
    let norms = glitch::row_norms(&embed);
    let never: std::collections::HashSet<u32> =
        glitch::synthetic_never_seen()?.into_iter().collect();
    let hi = norms.iter().copied().fold(0.0f32, f32::max) as f64 * 1.05;
    let bins = 60;
    let split = |seen: bool| {
        histogram(
            norms
                .iter()
                .enumerate()
                .filter(|(i, _)| never.contains(&(*i as u32)) != seen)
                .map(|(_, &n)| n as f64),
            0.0,
            hi,
            bins,
        )
    };
    let (trained, untrained) = (split(true), split(false));
    let top = trained.iter().chain(&untrained).copied().max().unwrap_or(1) as f64;
    let mut chart = plot(
        root,
        "Embedding L2 norms, synthetic checkpoint (log y)",
        TITLE,
    )
    .build_cartesian_2d(0f64..hi, (0.8f64..top * 2.0).log_scale())?;
    mesh(&mut chart)
        .x_desc("L2 norm of the embedding row")
        .y_desc("rows")
        .draw()?;
    let w = hi / bins as f64;
    for (h, color, label) in [
        (
            &trained,
            BLUE,
            format!("seen in training ({} rows)", norms.len() - never.len()),
        ),
        (
            &untrained,
            RED,
            format!("never seen: kept the initial norm ({} rows)", never.len()),
        ),
    ] {
        chart
            .draw_series(
                h.iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, &c)| {
                        Rectangle::new(
                            [(i as f64 * w, 0.8), ((i as f64 + 1.0) * w, c as f64)],
                            color.mix(0.7).filled(),
                        )
                    }),
            )?
            .label(label)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.mix(0.7).filled())
            });
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// Length of every token of the real Qwen vocabulary, in characters and in bytes (log y).
pub(super) fn tok_vocab_lengths(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let tok = crate::tokenizer::Tokenizer::qwen()?;
    let max_len = 80usize;
    let mut chars = vec![0u64; max_len + 1];
    let mut bytes = vec![0u64; max_len + 1];
    for (_, b) in tok.vocab.iter() {
        let c = String::from_utf8_lossy(b).chars().count();
        chars[c.min(max_len)] += 1;
        bytes[b.len().min(max_len)] += 1;
    }
    let top = chars.iter().chain(&bytes).copied().max().unwrap_or(1) as f64;
    let mut chart = plot(
        root,
        "Token lengths in Qwen's vocabulary (151,643 ranks; log y; ≥ 80 pooled)",
        TITLE,
    )
    .y_label_area_size(px(56.0))
    .build_cartesian_2d(0f64..(max_len + 1) as f64, (0.8f64..top * 2.0).log_scale())?;
    mesh(&mut chart)
        .x_desc("length of the token")
        .y_desc("tokens")
        .draw()?;
    for (h, color, label) in [
        (&bytes, BLUE, "bytes"),
        (
            &chars,
            RED,
            "characters (decoded, U+FFFD for partial UTF-8)",
        ),
    ] {
        chart
            .draw_series(LineSeries::new(
                h.iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, &c)| (i as f64, c as f64)),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(line_key(color.stroke_width(2)));
    }
    chart
        .draw_series(LineSeries::new(
            [(20.5, 0.8), (20.5, top * 2.0)],
            BLACK.mix(0.5),
        ))?
        .label("the literal scan keeps > 20 characters")
        .legend(line_key(BLACK.mix(0.5)));
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// Histogram of `values` in `bins` equal bins over `[lo, hi)`: the counts.
fn histogram(values: impl Iterator<Item = f64>, lo: f64, hi: f64, bins: usize) -> Vec<u64> {
    let mut h = vec![0u64; bins];
    for v in values {
        let b = (((v - lo) / (hi - lo)) * bins as f64).floor();
        h[(b.max(0.0) as usize).min(bins - 1)] += 1;
    }
    h
}

/// `tok.bos_sink` on the bundled model: each head's mean attention on the first position of
/// held-out windows (transformers' eager attention, recorded in `attention_sink.json` and
/// pinned to ours by the claim), grouped by layer, against the share equal attention over
/// the causal prefix would give and the claim's 4× rule.
pub(super) fn tok_bos_sink(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let path = crate::qwen3::trained::trained_dir().join("attention_sink.json");
    let doc = crate::error::read_json(&path)?;
    let layers: Vec<Vec<f64>> = doc["first_position_share"]
        .as_array()
        .map(|ls| {
            ls.iter()
                .map(|h| {
                    h.as_array()
                        .map(|v| v.iter().filter_map(|x| x.as_f64()).collect())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default();
    let uniform = doc["uniform_share"].as_f64().unwrap_or(0.0);
    let heads = layers.iter().map(Vec::len).max().unwrap_or(0);
    let n_layers = layers.len().max(1) as f64;
    // Layer l's heads share the slot l − 0.4 .. l + 0.4, so the axis labels fall on layers.
    let width = 0.8 / heads.max(1) as f64;
    let top = layers
        .iter()
        .flatten()
        .copied()
        .fold(4.0 * uniform, f64::max)
        * 1.15;
    let (grey, red) = (RGBColor(120, 120, 120), RGBColor(200, 30, 60));
    let root = root.titled(
        "attention on the first position, per layer and head (bundled model)",
        font(TITLE),
    )?;
    let root = legend_on_top(
        &root,
        &[
            (Key::Fill(BLUE_BAR), "one head's mean attention".to_string()),
            (
                Key::Line(grey, 2),
                "equal attention over the prefix".to_string(),
            ),
            (
                Key::Dashed(red, 2),
                "4× that: the claim's sink rule".to_string(),
            ),
        ],
    )?;
    let mut chart =
        plot(&root, "", TITLE).build_cartesian_2d(-0.5f64..n_layers - 0.5, 0f64..top.max(0.01))?;
    mesh(&mut chart)
        .disable_x_mesh()
        .x_desc("layer (one bar per head)")
        .y_desc("mean attention probability")
        .x_labels(layers.len().max(1))
        .x_label_formatter(&|x| format!("layer {}", tick(x)))
        .draw()?;
    for (l, hs) in layers.iter().enumerate() {
        chart.draw_series(hs.iter().enumerate().map(|(h, &v)| {
            let x = l as f64 - 0.4 + h as f64 * width;
            Rectangle::new([(x, 0.0), (x + 0.85 * width, v)], BLUE_BAR.filled())
        }))?;
    }
    let span = vec![(-0.5, uniform), (n_layers - 0.5, uniform)];
    chart.draw_series(LineSeries::new(span.clone(), grey.stroke_width(2)))?;
    chart.draw_series(DashedLineSeries::new(
        span.iter().map(|&(x, y)| (x, 4.0 * y)),
        6,
        4,
        red.stroke_width(2),
    ))?;
    Ok(())
}

const BLUE_BAR: RGBColor = RGBColor(30, 100, 200);
