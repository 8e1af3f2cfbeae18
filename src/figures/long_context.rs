//! Chapter 3's figures (source S0 5.2): wavelength per plane under PI, NTK-aware and YaRN,
//! and YaRN's ramp between the bands.

use super::{Area, BASE, D, DrawResult, TITLE, draw_legend, line_key, mesh, plot};
use crate::long_context::scaling::{self, RopeConfig, RopeScaling};
use crate::position::rope;
use plotters::prelude::*;

fn qwen3_yarn() -> RopeConfig {
    RopeConfig::new(
        D,
        BASE,
        Some(&serde_json::json!({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096})),
        Some(32_768),
        "figure",
    )
    .expect("valid YaRN settings")
}

/// Wavelength per plane under PI, NTK-aware and YaRN (×8 from 4096), against the original.
pub(super) fn scaling_wavelengths(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let original = rope::inv_freq(D, BASE);
    let s = 8.0;
    let pi: Vec<f64> = original.iter().map(|f| f / s).collect();
    let ntk = rope::inv_freq(D, scaling::ntk_base(BASE, s, D));
    let yarn = qwen3_yarn().init(None)?.inv_freq;
    let mut chart = plot(
        root,
        "Wavelength per plane, ×8 extension from 4096 (d = 128, base 10 000)",
        TITLE,
    )
    .y_label_area_size(super::px(72.0))
    .build_cartesian_2d(0f64..63.0, (1f64..1e6).log_scale())?;
    mesh(&mut chart)
        .x_desc("plane i")
        .y_desc("wavelength 2π/θ_i (tokens)")
        .draw()?;
    for (freqs, color, label) in [
        (&original, BLACK, "original"),
        (&pi, RED, "PI (θ/8)"),
        (&ntk, BLUE, "NTK-aware (base·8^(d/(d−2)))"),
        (&yarn, GREEN, "YaRN (β_fast 32, β_slow 1)"),
    ] {
        chart
            .draw_series(LineSeries::new(
                freqs
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (i as f64, rope::wavelength(*f))),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(line_key(color.stroke_width(2)));
    }
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, 4096.0), (63.0, 4096.0)],
            8,
            5,
            MAGENTA.stroke_width(2),
        ))?
        .label("training length 4096")
        .legend(line_key(MAGENTA.stroke_width(2)));
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

/// YaRN's ramp: the fraction of interpolation each plane gets.
pub(super) fn yarn_ramp(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let cfg = qwen3_yarn();
    let RopeScaling::Yarn(y) = &cfg.scaling else {
        return Err("not YaRN".into());
    };
    let ramp = scaling::yarn_ramp(y, cfg.theta, D);
    let mut chart = plot(
        root,
        "YaRN ramp: 0 = keep the original speed, 1 = interpolate by s",
        TITLE,
    )
    .build_cartesian_2d(0f64..63.0, -0.05f64..1.05)?;
    mesh(&mut chart)
        .x_desc("plane i")
        .y_desc("ramp r_i")
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            ramp.iter().enumerate().map(|(i, r)| (i as f64, *r)),
            RED.stroke_width(2),
        ))?
        .label("d = 128, base 10 000, original 4096, β_fast 32, β_slow 1")
        .legend(line_key(RED.stroke_width(2)));
    chart.draw_series(
        ramp.iter()
            .enumerate()
            .map(|(i, r)| Circle::new((i as f64, *r), 3, RED.filled())),
    )?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}
