//! Chapter 3 on a real model: SmolLM2-135M's per-token loss by position bucket with each
//! RoPE scaling set at inference, from the runs `real.direct_extrapolation`,
//! `real.scaling_no_finetune` and `real.pi_short` judge.

use super::*;
use crate::claims::real_extrapolation::{METHODS, Run, runs};

const COLORS: [RGBColor; 5] = [
    RGBColor(0, 0, 0),
    RGBColor(200, 30, 60),
    RGBColor(30, 100, 200),
    RGBColor(120, 60, 170),
    RGBColor(20, 140, 60),
];

/// Each method's longest run: mean loss per bucket (bucket k spans [L·2^(k−1), L·2^k),
/// bucket 0 is [0, L)), with ± one standard error.
pub(super) fn real_extrapolation(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let runs = runs()?;
    let l = runs.first().map_or(1, |r| r.trained_context);
    let longest = |m: &str| -> Option<&Run> {
        runs.iter()
            .filter(|r| r.method == m)
            .max_by_key(|r| (r.tokens, r.factor as u64))
    };
    let shown: Vec<(String, RGBColor, &Run)> = METHODS
        .iter()
        .zip(COLORS)
        .filter_map(|(&(m, name), c)| {
            let r = longest(m)?;
            Some((format!("{name} (×{}, {} tokens)", r.factor, r.tokens), c, r))
        })
        .collect();
    let points = |r: &Run| -> Vec<(f64, f64, f64)> {
        r.buckets
            .iter()
            .enumerate()
            .map(|(k, b)| (k as f64, b.mean, b.stderr))
            .collect()
    };
    let (lo, hi) = shown
        .iter()
        .flat_map(|(_, _, r)| points(r))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (_, m, e)| {
            (a.min(m - e), b.max(m + e))
        });
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    let pad = ((hi - lo) * 0.1).max(0.05);
    let buckets = shown
        .iter()
        .map(|(_, _, r)| r.buckets.len())
        .max()
        .unwrap_or(1);
    let keys: Vec<(Key, String)> = shown
        .iter()
        .map(|(label, c, _)| (Key::Line(*c, 2), label.clone()))
        .collect();
    let caption = format!("SmolLM2-135M, per-token loss by position (L = {l}), no fine-tune");
    let root = root.titled(&caption, font(TITLE))?;
    let root = legend_on_top(&root, &keys)?;
    let mut chart = plot(&root, "", TITLE)
        .build_cartesian_2d(-0.3f64..buckets as f64 - 0.7, (lo - pad)..(hi + pad))?;
    let names = ["[0, L)", "[L, 2L)", "[2L, 4L)", "[4L, 8L)"];
    mesh(&mut chart)
        .x_labels(buckets)
        .x_label_formatter(&|x| {
            let k = x.round();
            match names.get(k as usize) {
                Some(n) if (x - k).abs() < 1e-6 => n.to_string(),
                _ => String::new(),
            }
        })
        .x_desc("position bucket")
        .y_desc("mean loss (nats)")
        .draw()?;
    let n = shown.len().max(1) as f64;
    for (i, (_, color, r)) in shown.iter().enumerate() {
        // Methods side by side within a bucket, so error bars do not overlap.
        let dx = (i as f64 - (n - 1.0) / 2.0) * 0.06;
        let pts: Vec<(f64, f64, f64)> = points(r)
            .into_iter()
            .map(|(x, m, e)| (x + dx, m, e))
            .collect();
        chart.draw_series(LineSeries::new(
            pts.iter().map(|&(x, m, _)| (x, m)),
            color.stroke_width(2),
        ))?;
        chart.draw_series(pts.iter().map(|&(x, m, e)| {
            PathElement::new(vec![(x, m - e), (x, m + e)], color.stroke_width(2))
        }))?;
        chart.draw_series(
            pts.iter()
                .map(|&(x, m, _)| Circle::new((x, m), 3, color.filled())),
        )?;
    }
    Ok(())
}
