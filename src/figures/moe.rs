//! Chapter 5's figure (source S0 5.4): expert load over training under no balancing, an
//! auxiliary loss and DeepSeek-V3's bias.

use super::{Area, DrawResult};
use plotters::prelude::*;

/// Expert load over training steps of the simulated router: none, auxiliary loss,
/// DeepSeek-V3 bias.
pub(super) fn moe_balance(root: &Area) -> DrawResult {
    use crate::moe::balance::{Balancing, book_runs};
    root.fill(&WHITE)?;
    let (cfg, runs) = book_runs();
    let panels = root.split_evenly((1, 3));
    for (panel, run) in panels.iter().zip(&runs) {
        let title = match run.balancing {
            Balancing::None => "no balancing".to_string(),
            Balancing::AuxLoss(a) => format!("auxiliary loss (coef. {a})"),
            Balancing::Bias(g) => format!("DeepSeek-V3 bias (γ = {g})"),
        };
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..cfg.steps as f64, 0f64..0.55)?;
        chart
            .configure_mesh()
            .x_desc("training step")
            .y_desc("share of assignments")
            .draw()?;
        for e in 0..cfg.num_experts {
            let color = Palette99::pick(e).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    run.load
                        .iter()
                        .enumerate()
                        .map(|(s, l)| (s as f64, l[e] as f64)),
                    color.stroke_width(1),
                ))?
                .label(format!("expert {e}"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        let even = 1.0 / cfg.num_experts as f64;
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, even), (cfg.steps as f64, even)],
                6,
                4,
                BLACK.stroke_width(2),
            ))?
            .label("even load 1/8")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(2)));
        if run.balancing == Balancing::None {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .label_font(("sans-serif", 11))
                .draw()?;
        }
    }
    Ok(())
}
