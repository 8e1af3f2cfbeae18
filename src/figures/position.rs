//! Chapters 1–2's figures (source S0 5.1): RoPE's planes as clocks, the cos table by
//! position and dimension, and the long-range decay of the score sum.

use super::{Area, BASE, D, DrawResult, Key, PANEL, TITLE, draw_legend, font, plot};
use super::{legend_on_top, line_key, mesh, mesh_fonts, tick};
use crate::position::{decay, rope};
use plotters::prelude::*;

/// The source's three hands (chapter 1's table): planes 0, d/4 and d/2 − 1.
const HANDS: [(usize, RGBColor, &str); 3] = [
    (0, RED, "second"),
    (D / 4, BLUE, "minute"),
    (D / 2 - 1, RGBColor(0, 150, 60), "hour"),
];

/// The smallest round number (1, 2, 2.5, 3, 4, 5, 6, 8 × 10ᵏ) at least `x`.
fn round_up(x: f64) -> f64 {
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&v| v >= x)
        .unwrap_or(10.0 * p)
}

/// cos(m·θ_i) of the second, minute and hour hands, one panel per hand over about four and
/// a half of its turns; each panel also draws the slower hands and leaves out the faster
/// ones, which would fill it solid.
pub(super) fn rope_clocks(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let f = rope::inv_freq(D, BASE);
    let root = root.titled(
        "RoPE's planes as clock hands: cos(m·θ_i), d = 128, base 10 000",
        font(TITLE),
    )?;
    let keys: Vec<(Key, String)> = HANDS
        .iter()
        .map(|&(i, color, name)| {
            let w = rope::wavelength(f[i]);
            let w = if w < 100.0 {
                format!("{w:.2}")
            } else {
                tick(&w.round())
            };
            (
                Key::Line(color, 2),
                format!("i = {i}, {name} hand: a turn every {w} tokens"),
            )
        })
        .collect();
    let body = legend_on_top(&root, &keys)?;
    let panels = body.split_evenly((HANDS.len(), 1));
    for (p, panel) in panels.iter().enumerate() {
        let (i, _, name) = HANDS[p];
        let window = round_up(4.5 * rope::wavelength(f[i]));
        let mut caption = format!("positions 0 to {}: the {name} hand", tick(&window));
        if p > 0 {
            let (fast, _, _) = HANDS[p - 1];
            caption.push_str(&format!(
                " (i = {fast} left out: {} turns here)",
                tick(&(window / rope::wavelength(f[fast])).round())
            ));
        }
        let mut chart =
            plot(panel, &caption, PANEL).build_cartesian_2d(0f64..window, -1.15f64..1.15)?;
        let mut m = mesh(&mut chart);
        m.y_labels(3).y_desc("cos(m·θ_i)");
        if p + 1 == HANDS.len() {
            m.x_desc("position m");
        }
        m.draw()?;
        // Slowest first, so the panel's own hand is drawn on top.
        for &(i, color, _) in HANDS[p..].iter().rev() {
            let theta = f[i];
            let points = (0..=800).map(|k| {
                let m = window * k as f64 / 800.0;
                (m, (m * theta).cos())
            });
            chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
            if i == HANDS[p].0 && p == 0 {
                // Tokens sit at whole positions: the second hand is sampled there.
                chart.draw_series((0..=window as usize).map(|m| {
                    Circle::new((m as f64, (m as f64 * theta).cos()), 3, color.filled())
                }))?;
            }
        }
    }
    Ok(())
}

/// cos(m·θ_i) over the first 96 positions × the dimensions (half-split layout: dimension j
/// uses plane j mod 64).
pub(super) fn rope_heatmap(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let f = rope::inv_freq(D, BASE);
    let positions = 96usize;
    let mut chart = plot(
        root,
        "cos(m·θ_(j mod 64)) by position and dimension: yellow +1, purple −1",
        TITLE,
    )
    .build_cartesian_2d(0..D, 0..positions)?;
    mesh_fonts(&mut chart)
        .disable_mesh()
        .x_desc("dimension j")
        .y_desc("position m")
        .draw()?;
    chart.draw_series((0..positions).flat_map(|m| {
        let f = &f;
        (0..D).map(move |j| {
            let v = (m as f64 * f[j % (D / 2)]).cos();
            let color = ViridisRGB::get_color(((v + 1.0) / 2.0) as f32);
            Rectangle::new([(j, m), (j + 1, m + 1)], color.filled())
        })
    }))?;
    Ok(())
}

/// S(τ) on a log axis with the logarithmic law fitted to it and the C/τ law beside it.
pub(super) fn rope_decay(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let fit = decay::fit_decay(D, BASE, 1e4, 200);
    let dense = decay::log_spaced_taus(1e4, 1500);
    let mut chart = plot(
        root,
        "Long-range decay S(τ) = Σ cos(τ·θ_j): logarithmic, not 1/τ",
        TITLE,
    )
    .build_cartesian_2d((1f64..1e4).log_scale(), -25f64..70.0)?;
    mesh(&mut chart)
        .x_desc("relative distance τ (log scale)")
        .y_desc("S(τ)")
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            dense.iter().map(|&t| (t, decay::decay_sum(D, BASE, t))),
            BLUE.stroke_width(1),
        ))?
        .label("S(τ), d = 128, base 10000")
        .legend(line_key(BLUE));
    let (a, b) = (fit.log_intercept, fit.log_slope);
    chart
        .draw_series(LineSeries::new(
            dense.iter().map(|&t| (t, a + b * t.ln())),
            RED.stroke_width(2),
        ))?
        .label(format!(
            "fit {a:.1} {} {:.2}·ln τ  (R² {:.2})",
            if b < 0.0 { "−" } else { "+" },
            b.abs(),
            fit.log_r2
        ))
        .legend(line_key(RED.stroke_width(2)));
    let c = fit.inverse_c;
    chart
        .draw_series(LineSeries::new(
            dense.iter().map(|&t| (t, c / t)),
            BLACK.stroke_width(1),
        ))?
        .label(format!("best C/τ  (R² {})", signed(fit.inverse_r2)))
        .legend(line_key(BLACK));
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// A number with a true minus sign, to two decimals.
fn signed(x: f64) -> String {
    if x < 0.0 {
        format!("−{:.2}", -x)
    } else {
        format!("{x:.2}")
    }
}
