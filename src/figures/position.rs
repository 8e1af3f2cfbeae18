//! Chapters 1–2's figures (source S0 5.1): RoPE's planes as clocks, the cos table by
//! position and dimension, and the long-range decay of the score sum.

use super::line_key;
use super::{Area, BASE, D, DrawResult, draw_legend};
use crate::position::{decay, rope};
use plotters::prelude::*;

/// cos(m·θ_i) against position for a fast, a middle and a slow plane.
pub(super) fn rope_clocks(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let f = rope::inv_freq(D, BASE);
    let mut chart = ChartBuilder::on(root)
        .caption(
            "RoPE as clocks: cos(m·θ_i), d = 128, base 10000",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..1000.0, -1.1f64..1.1)?;
    chart
        .configure_mesh()
        .x_desc("position m")
        .y_desc("cos(m·θ_i)")
        .draw()?;
    for (i, color, label) in [
        (0usize, RED, "i = 0 (second hand)"),
        (16, BLUE, "i = 16 (minute hand)"),
        (48, GREEN, "i = 48 (hour hand)"),
    ] {
        let theta = f[i];
        let points = (0..=2000).map(|k| {
            let m = k as f64 * 0.5;
            (m, (m * theta).cos())
        });
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(format!(
                "{label}, wavelength {:.2}",
                rope::wavelength(theta)
            ))
            .legend(line_key(color.stroke_width(2)));
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    Ok(())
}

/// cos(m·θ_i) over positions × dimensions (half-split layout: dimension j uses plane j mod 64).
pub(super) fn rope_heatmap(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let f = rope::inv_freq(D, BASE);
    let positions = 64usize;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "cos(m·θ_(j mod 64)) by position and dimension (d = 128, base 10000)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0..D, 0..positions)?;
    chart
        .configure_mesh()
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
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Long-range decay S(τ) = Σ cos(τ·θ_j): logarithmic, not 1/τ",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((1f64..1e4).log_scale(), -25f64..70.0)?;
    chart
        .configure_mesh()
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
        .label(format!("fit {a:.1} {b:+.2}·ln τ  (R² {:.2})", fit.log_r2))
        .legend(line_key(RED.stroke_width(2)));
    let c = fit.inverse_c;
    chart
        .draw_series(LineSeries::new(
            dense.iter().map(|&t| (t, c / t)),
            BLACK.stroke_width(1),
        ))?
        .label(format!("best C/τ  (R² {:.2})", fit.inverse_r2))
        .legend(line_key(BLACK));
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}
