//! Chapter 5's figure (source S0 5.4): expert load over training under no balancing, an
//! auxiliary loss and DeepSeek-V3's bias.

use super::{Area, DrawResult, Key, PANEL, legend_on_top, mesh, plot};
use plotters::prelude::*;

/// Expert load over training steps of the simulated router: none, auxiliary loss,
/// DeepSeek-V3 bias; one legend above the three panels.
pub(super) fn moe_balance(root: &Area) -> DrawResult {
    use crate::moe::balance::{Balancing, book_runs};
    root.fill(&WHITE)?;
    let (cfg, runs) = book_runs();
    let color = |e: usize| {
        let c = Palette99::pick(e).to_rgba();
        RGBColor(c.0, c.1, c.2)
    };
    let mut keys: Vec<(Key, String)> = (0..cfg.num_experts)
        .map(|e| (Key::Line(color(e), 2), format!("expert {e}")))
        .collect();
    keys.push((
        Key::Dashed(BLACK, 2),
        format!("even load 1/{}", cfg.num_experts),
    ));
    let body = legend_on_top(root, &keys)?;
    let panels = body.split_evenly((1, 3));
    for (panel, run) in panels.iter().zip(&runs) {
        let title = match run.balancing {
            Balancing::None => "no balancing".to_string(),
            Balancing::AuxLoss(a) => format!("auxiliary loss (coef. {a})"),
            Balancing::Bias(g) => format!("DeepSeek-V3 bias (γ = {g})"),
        };
        let mut chart =
            plot(panel, &title, PANEL).build_cartesian_2d(0f64..cfg.steps as f64, 0f64..0.55)?;
        mesh(&mut chart)
            .x_desc("training step")
            .y_desc("share of assignments")
            .draw()?;
        for e in 0..cfg.num_experts {
            chart.draw_series(LineSeries::new(
                run.load
                    .iter()
                    .enumerate()
                    .map(|(s, l)| (s as f64, l[e] as f64)),
                color(e).stroke_width(1),
            ))?;
        }
        let even = 1.0 / cfg.num_experts as f64;
        chart.draw_series(DashedLineSeries::new(
            [(0.0, even), (cfg.steps as f64, even)],
            6,
            4,
            BLACK.stroke_width(2),
        ))?;
    }
    Ok(())
}
