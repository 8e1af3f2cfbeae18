//! Chapter 7's figures (source S0 5.6): what Newton–Schulz does to a singular value, and
//! the measured Muon / Adam / SGD demo (loss curves and learning-rate sweeps).

use super::{Area, DrawResult, Key, PANEL, TITLE, draw_legend, font, legend_on_top, plot};
use super::{line_key, mesh, px};
use plotters::prelude::*;

/// What Newton–Schulz does to one singular value: the quintic p applied 1…5 times to
/// x = σ/‖G‖_F, on a log axis from 10⁻³ to 1.
pub(super) fn newton_schulz_map(root: &Area) -> DrawResult {
    use crate::optim::muon::{NS_COEFFICIENTS, ns_polynomial};
    root.fill(&WHITE)?;
    let colors = [
        RGBColor(200, 200, 240),
        RGBColor(150, 150, 230),
        RGBColor(100, 100, 220),
        RGBColor(50, 50, 200),
        RED,
    ];
    let width = |k: usize| if k == 5 { 3 } else { 2 };
    let grey = RGBColor(128, 128, 128);
    let mut keys: Vec<(Key, String)> = (1..=5)
        .zip(colors)
        .map(|(k, c)| {
            let steps = format!("{k} step{}", if k == 1 { "" } else { "s" });
            (Key::Line(c, width(k)), steps)
        })
        .collect();
    keys.push((
        Key::Line(grey, 1),
        "exact polar factor UVᵀ (every σ → 1)".to_string(),
    ));
    let root = root.titled(
        "Newton–Schulz on one singular value: p(x) = 3.4445x − 4.7750x³ + 2.0315x⁵, iterated",
        font(TITLE),
    )?;
    let root = legend_on_top(&root, &keys)?;
    let mut chart =
        plot(&root, "", TITLE).build_cartesian_2d((1e-3f64..1.0).log_scale(), 0f64..1.35)?;
    mesh(&mut chart)
        .x_desc("normalised singular value x = σ / ‖G‖_F (log scale)")
        .y_desc("after k steps")
        .draw()?;
    let xs: Vec<f64> = (0..=400)
        .map(|i| 10f64.powf(-3.0 + 3.0 * i as f64 / 400.0))
        .collect();
    for (k, color) in (1..=5).zip(colors) {
        let points = xs.iter().map(|&x| {
            let mut y = x;
            for _ in 0..k {
                y = ns_polynomial(y, NS_COEFFICIENTS);
            }
            (x, y)
        });
        chart.draw_series(LineSeries::new(points, color.stroke_width(width(k))))?;
    }
    chart.draw_series(LineSeries::new([(1e-3, 1.0), (1.0, 1.0)], grey))?;
    Ok(())
}

const OPT_COLORS: [RGBColor; 3] = [
    RGBColor(230, 120, 0),
    RGBColor(30, 100, 200),
    RGBColor(200, 30, 60),
];

/// Held-out loss against steps for SGD-momentum, Adam and Muon at their tuned learning
/// rates: left the 1 000-step budget, right the 300-step one.
pub(super) fn muon_demo(root: &Area) -> DrawResult {
    use crate::optim::demo;
    root.fill(&WHITE)?;
    let (long, short) = demo::book_runs();
    let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);
    for (area, run) in [(&left, long), (&right, short)] {
        let steps = run.config.eval_steps();
        let caption = format!(
            "{} steps: {} ends lowest",
            run.config.steps,
            run.winner().kind.name()
        );
        let mut chart = plot(area, &caption, PANEL)
            .y_label_area_size(px(54.0))
            // Up to 20: the decade above the curves holds the key.
            .build_cartesian_2d(0f64..run.config.steps as f64, (5e-3f64..20.0).log_scale())?;
        mesh(&mut chart)
            .x_desc("step")
            .y_desc("held-out MSE (mean of 3 seeds)")
            .draw()?;
        for (s, color) in run.sweeps.iter().zip(OPT_COLORS) {
            chart
                .draw_series(LineSeries::new(
                    steps
                        .iter()
                        .zip(&s.best_curve)
                        .map(|(&t, &l)| (t as f64, l.max(5e-3))),
                    color.stroke_width(2),
                ))?
                .label(format!(
                    "{}, lr {} → {:.4}",
                    s.kind.name(),
                    s.best_lr,
                    s.best_final
                ))
                .legend(line_key(color.stroke_width(2)));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    Ok(())
}

/// Final held-out loss against learning rate for each optimizer (1 000 steps solid,
/// 300 steps dashed): the tuned rate of each is the minimum of its curve.
pub(super) fn muon_sweep(root: &Area) -> DrawResult {
    use crate::optim::demo;
    root.fill(&WHITE)?;
    let (long, short) = demo::book_runs();
    let root = root.titled(
        "Learning-rate sweeps: final held-out MSE after 1 000 and 300 steps",
        font(TITLE),
    )?;
    let mut keys: Vec<(Key, String)> = long
        .sweeps
        .iter()
        .zip(OPT_COLORS)
        .map(|(s, c)| (Key::Line(c, 2), s.kind.name().to_string()))
        .collect();
    keys.push((Key::Line(BLACK, 2), "1 000 steps".to_string()));
    keys.push((Key::Dashed(BLACK, 2), "300 steps".to_string()));
    let root = legend_on_top(&root, &keys)?;
    let mut chart = plot(&root, "", TITLE)
        .y_label_area_size(px(54.0))
        .build_cartesian_2d(
            (1e-3f64..10.0)
                .log_scale()
                .with_key_points(vec![1e-3, 1e-2, 0.1, 1.0, 10.0]),
            (5e-3f64..5.0).log_scale(),
        )?;
    mesh(&mut chart)
        .x_desc("learning rate (log scale)")
        .y_desc("final held-out MSE")
        .draw()?;
    for (run, dashed) in [(long, false), (short, true)] {
        for (s, color) in run.sweeps.iter().zip(OPT_COLORS) {
            // Diverged runs (NaN) are left out of the line.
            let points: Vec<(f64, f64)> = s
                .lrs
                .iter()
                .zip(&s.final_losses)
                .filter(|(_, l)| l.is_finite())
                .map(|(&lr, &l)| (lr, l.clamp(5e-3, 5.0)))
                .collect();
            if dashed {
                chart.draw_series(DashedLineSeries::new(
                    points.clone(),
                    6,
                    4,
                    color.stroke_width(2),
                ))?;
            } else {
                chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?;
            }
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
    }
    Ok(())
}
