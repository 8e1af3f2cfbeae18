//! Chapter 12's figure: the recorded default `anatomy train` run (data/train/runs/), its
//! training and held-out loss against the unigram baseline of the same corpus, and how
//! unevenly each MoE layer's router spread its picks.

use super::{Area, DrawResult, Key, PANEL, TITLE, font, legend_on_top, mesh, plot};
use crate::train::data::load_corpus;
use crate::train::trainer::{read_log, unigram_loss};
use plotters::prelude::*;
use std::path::Path;

/// The run the figure draws, relative to the crate root.
pub const RUN_LOG: &str = "data/train/runs/default-420/train_log.jsonl";
/// The held-out fraction that run used (`TrainOptions`' default).
const HELDOUT_FRACTION: f64 = 0.05;

const LAYER_COLORS: [RGBColor; 4] = [
    RGBColor(30, 100, 200),
    RGBColor(230, 120, 0),
    RGBColor(40, 150, 60),
    RGBColor(200, 30, 60),
];

/// Left: loss per step, held-out loss at each evaluation, and the unigram baseline
/// (computed here from data/corpus with the Qwen tokenizer). Right: per MoE layer, the
/// busiest expert's share of picks over the mean share (1 = even).
pub(super) fn train_curves(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let log = read_log(&crate_dir.join(RUN_LOG))?;
    let tok = crate::tokenizer::Tokenizer::from_file(&crate::tokenizer::qwen_vocab_path())?;
    let corpus = load_corpus(&crate_dir.join("data/corpus"), &tok, HELDOUT_FRACTION)?;
    let unigram = unigram_loss(&corpus.train, &corpus.heldout) as f64;
    let steps = log.last().map_or(1, |l| l.step) as f64;
    let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);

    let top = log.iter().map(|l| l.loss as f64).fold(unigram, f64::max) + 0.5;
    let heldout: Vec<(f64, f64)> = log
        .iter()
        .filter_map(|l| l.heldout_loss.map(|h| (l.step as f64, h as f64)))
        .collect();
    let (grey, blue, red) = (RGBColor(120, 120, 120), LAYER_COLORS[0], LAYER_COLORS[3]);
    let left = left.titled("loss (nats per token)", font(PANEL))?;
    let left = legend_on_top(
        &left,
        &[
            (Key::Line(grey, 1), "training batch".to_string()),
            (
                Key::Line(blue, 2),
                format!(
                    "held out (last {:.2})",
                    heldout.last().map_or(f64::NAN, |h| h.1)
                ),
            ),
            (
                Key::Dashed(red, 2),
                format!("unigram baseline {unigram:.2}"),
            ),
        ],
    )?;
    let mut chart = plot(&left, "", TITLE).build_cartesian_2d(0f64..steps, 4f64..top)?;
    mesh(&mut chart).x_desc("step").draw()?;
    chart.draw_series(LineSeries::new(
        log.iter().map(|l| (l.step as f64, l.loss as f64)),
        grey.stroke_width(1),
    ))?;
    chart.draw_series(LineSeries::new(
        heldout.iter().copied(),
        blue.stroke_width(2),
    ))?;
    chart.draw_series(heldout.iter().map(|&p| Circle::new(p, 3, blue.filled())))?;
    chart.draw_series(DashedLineSeries::new(
        [(0.0, unigram), (steps, unigram)],
        6,
        4,
        red.stroke_width(2),
    ))?;

    let layers = log.first().map_or(0, |l| l.max_load_ratio.len());
    let peak = log
        .iter()
        .flat_map(|l| l.max_load_ratio.iter().map(|&r| r as f64))
        .fold(1.0, f64::max);
    let right = right.titled("busiest expert ÷ mean load", font(PANEL))?;
    let keys: Vec<(Key, String)> = (0..layers)
        .map(|layer| {
            let color = LAYER_COLORS[layer % LAYER_COLORS.len()];
            (Key::Line(color, 2), format!("layer {layer}"))
        })
        .collect();
    let right = legend_on_top(&right, &keys)?;
    let mut chart = plot(&right, "", TITLE).build_cartesian_2d(0f64..steps, 0.8f64..peak + 0.2)?;
    mesh(&mut chart).x_desc("step").draw()?;
    for layer in 0..layers {
        let color = LAYER_COLORS[layer % LAYER_COLORS.len()];
        chart.draw_series(LineSeries::new(
            log.iter().filter_map(|l| {
                l.max_load_ratio
                    .get(layer)
                    .map(|&r| (l.step as f64, r as f64))
            }),
            color.stroke_width(1),
        ))?;
    }
    Ok(())
}
