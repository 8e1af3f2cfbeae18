//! Chapter 11's figure: reconstruction error against bits per weight for every block
//! type, on Gaussian and heavy-tailed rows, measured with the crate's quantisers
//! ([`crate::params::quant_error`]).

use super::line_key;
use super::{Area, DrawResult, draw_legend};
use plotters::prelude::*;

/// RMSE / RMS of each type on a seeded Gaussian row and a Student-t (ν = 3) row of 16,384
/// weights, against its bits per weight, on a log axis; each point labelled by its type.
pub(super) fn quant_error(root: &Area) -> DrawResult {
    use crate::params::quant_error::{STUDENT_NU, error_table};
    root.fill(&WHITE)?;
    let table = error_table();
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Quantise, dequantise, compare: RMSE relative to the weights' RMS",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(4f64..17.0, (1e-4f64..0.3).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("bits per weight (scales included)")
        .y_desc("RMSE / RMS (log scale)")
        .draw()?;
    let series = [
        ("Gaussian weights", RGBColor(0, 114, 178), false),
        (
            "Student-t weights (heavy tails)",
            RGBColor(213, 94, 0),
            true,
        ),
    ];
    for (label, color, heavy) in series {
        let value = move |p: &crate::params::quant_error::ErrorPoint| {
            if heavy { p.student_t } else { p.gaussian }
        };
        let label = if heavy {
            format!("{label}, ν = {STUDENT_NU}")
        } else {
            label.to_string()
        };
        chart
            .draw_series(
                table
                    .iter()
                    .map(|p| Circle::new((p.bits_per_weight, value(p)), 5, color.filled())),
            )?
            .label(label)
            .legend(line_key(color.stroke_width(3)));
    }
    // Type names to the right of the Gaussian points.
    chart.draw_series(table.iter().map(|p| {
        EmptyElement::at((p.bits_per_weight, p.gaussian))
            + Text::new(p.ty.name(), (8, -7), ("sans-serif", 14))
    }))?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}
