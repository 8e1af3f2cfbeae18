//! The real models' figures (chapters 2 and 4): the attention sink per layer and the
//! decay of the mean post-RoPE score with distance, from the evidence `real.sink` and
//! `real.decay` judge.

use super::*;
use crate::claims::real::{RealDecay, RealSink, SINK_FACTOR, real_decays, real_sinks};

const MODEL_COLORS: [RGBColor; 2] = [RGBColor(30, 100, 200), RGBColor(200, 30, 60)];

/// `real.sink`: per layer (as a fraction of depth, so the two models share an axis), the
/// mean attention on position 0 as a multiple of the equal share, with the 4× rule.
pub(super) fn real_sink(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let sinks = real_sinks()?;
    let ratio = |s: &RealSink, x: f64| x / s.uniform;
    let top = sinks
        .iter()
        .flat_map(|s| s.per_layer.iter().map(move |&x| ratio(s, x)))
        .fold(SINK_FACTOR, f64::max)
        * 1.1;
    let grey = RGBColor(120, 120, 120);
    let mut keys: Vec<(Key, String)> = sinks
        .iter()
        .zip(MODEL_COLORS)
        .map(|(s, c)| {
            (
                Key::Line(c, 2),
                format!("{} ({} layers)", s.model, s.per_layer.len()),
            )
        })
        .collect();
    keys.push((
        Key::Dashed(grey, 2),
        format!("{SINK_FACTOR}× the equal share"),
    ));
    let root = root.titled("attention on position 0, real models", font(TITLE))?;
    let root = legend_on_top(&root, &keys)?;
    let mut chart = plot(&root, "", TITLE).build_cartesian_2d(0f64..1.0, 0f64..top)?;
    mesh(&mut chart)
        .x_desc("depth (layer / layers)")
        .y_desc("share on position 0 ÷ equal share")
        .draw()?;
    for (s, color) in sinks.iter().zip(MODEL_COLORS) {
        let n = s.per_layer.len().max(1) as f64;
        let points: Vec<(f64, f64)> = s
            .per_layer
            .iter()
            .enumerate()
            .map(|(l, &x)| ((l as f64 + 0.5) / n, ratio(s, x)))
            .collect();
        chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart.draw_series(DashedLineSeries::new(
        [(0.0, SINK_FACTOR), (1.0, SINK_FACTOR)],
        6,
        4,
        grey.stroke_width(2),
    ))?;
    Ok(())
}

/// `real.decay`: one panel per model, the mean post-RoPE score against distance averaged
/// over layers and for the first and last layer, beside the prior `S(τ)` rescaled to the
/// span of the layer mean (the prior's own unit is a sum of cosines, not a score).
pub(super) fn real_decay(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let decays = real_decays()?;
    let root = root.titled("mean q·k/√d against distance, real models", font(TITLE))?;
    let grey = RGBColor(120, 120, 120);
    let keys = [
        (
            Key::Line(MODEL_COLORS[0], 3),
            "mean over layers".to_string(),
        ),
        (
            Key::Line(RGBColor(230, 120, 0), 1),
            "first layer".to_string(),
        ),
        (Key::Line(RGBColor(0, 150, 80), 1), "last layer".to_string()),
        (Key::Dashed(grey, 2), "S(τ), rescaled".to_string()),
    ];
    let root = legend_on_top(&root, &keys)?;
    let panels = root.split_evenly((1, decays.len().max(1)));
    for (area, d) in panels.iter().zip(&decays) {
        decay_panel(area, d, grey)?;
    }
    Ok(())
}

fn decay_panel(area: &Area, d: &RealDecay, grey: RGBColor) -> DrawResult {
    let taus = d.prior.len();
    let layers = d.per_layer.len().max(1) as f64;
    let mean: Vec<f64> = (0..taus)
        .map(|t| d.per_layer.iter().map(|r| r[t]).sum::<f64>() / layers)
        .collect();
    let span = |r: &[f64]| {
        let lo = r[1..].iter().copied().fold(f64::INFINITY, f64::min);
        let hi = r[1..].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let (mlo, mhi) = span(&mean);
    let (plo, phi) = span(&d.prior);
    let prior: Vec<f64> = d
        .prior
        .iter()
        .map(|p| mlo + (p - plo) / (phi - plo).max(1e-12) * (mhi - mlo))
        .collect();
    let first = &d.per_layer[0];
    let last = &d.per_layer[d.per_layer.len() - 1];
    let (lo, hi) = [first, last, &mean]
        .iter()
        .map(|r| span(r))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |a, b| {
            (a.0.min(b.0), a.1.max(b.1))
        });
    let pad = 0.05 * (hi - lo).max(1e-9);
    let mut chart =
        plot(area, d.model, PANEL).build_cartesian_2d(1f64..taus as f64, lo - pad..hi + pad)?;
    mesh(&mut chart)
        .x_desc("distance τ (tokens)")
        .y_desc("mean score")
        .draw()?;
    let series = |r: &[f64]| -> Vec<(f64, f64)> {
        r.iter()
            .enumerate()
            .skip(1)
            .map(|(t, &v)| (t as f64, v))
            .collect()
    };
    chart.draw_series(LineSeries::new(
        series(first),
        RGBColor(230, 120, 0).stroke_width(1),
    ))?;
    chart.draw_series(LineSeries::new(
        series(last),
        RGBColor(0, 150, 80).stroke_width(1),
    ))?;
    chart.draw_series(LineSeries::new(
        series(&mean),
        MODEL_COLORS[0].stroke_width(3),
    ))?;
    chart.draw_series(DashedLineSeries::new(
        series(&prior),
        6,
        4,
        grey.stroke_width(2),
    ))?;
    Ok(())
}
