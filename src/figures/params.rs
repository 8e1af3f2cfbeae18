//! Chapter 6's figure (source S0 5.5.2): where the parameters of Qwen3-30B-A3B and
//! Qwen3-32B are, total against active.

use super::{Area, DrawResult, LABEL, TICK, TITLE, draw_legend, font, mesh, plot};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Shares of embedding / attention / FFN-or-MoE / norms in Qwen3-30B-A3B (total and
/// active) and Qwen3-32B, as stacked horizontal bars.
pub(super) fn param_shares(root: &Area) -> DrawResult {
    use crate::params::{bundled, count};
    root.fill(&WHITE)?;
    let a3b = count(&bundled("qwen3-30b-a3b")?);
    let dense = count(&bundled("qwen3-32b")?);
    let total = |r: &crate::params::ParamReport| crate::params::Split {
        embedding: r.embedding,
        attention: r.attention,
        ffn: r.ffn,
        norms: r.norms,
    };
    let bars = [
        ("Qwen3-30B-A3B, all parameters", total(&a3b), a3b.total),
        (
            "Qwen3-30B-A3B, active per token (8 of 128 experts)",
            a3b.active_split,
            a3b.active,
        ),
        (
            "Qwen3-32B (dense), all parameters",
            total(&dense),
            dense.total,
        ),
    ];
    let parts: [(&str, RGBColor); 4] = [
        ("embeddings", RGBColor(230, 159, 0)),
        ("attention", RGBColor(0, 114, 178)),
        ("FFN / MoE", RGBColor(0, 158, 115)),
        ("RMSNorm", RGBColor(204, 121, 167)),
    ];
    let mut chart = plot(root, "Where the parameters are: total vs active", TITLE)
        .y_label_area_size(10)
        .build_cartesian_2d(0f64..100.0, -1.2f64..3.0)?;
    mesh(&mut chart)
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("share of the parameter count (%)")
        .draw()?;
    for (p, (label, color)) in parts.iter().enumerate() {
        let color = *color;
        let segments = bars.iter().enumerate().map(move |(row, (_, s, of))| {
            let values = [s.embedding, s.attention, s.ffn, s.norms];
            let start: u64 = values[..p].iter().sum();
            let x0 = 100.0 * start as f64 / *of as f64;
            let x1 = 100.0 * (start + values[p]) as f64 / *of as f64;
            let y = 2.0 - row as f64;
            Rectangle::new([(x0, y + 0.12), (x1, y + 0.68)], color.filled())
        });
        chart
            .draw_series(segments)?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    for (row, (name, s, of)) in bars.iter().enumerate() {
        let y = 2.0 - row as f64;
        // Shares too thin to label inside their segment go into the title.
        let small: Vec<String> = [("embeddings", s.embedding), ("attention", s.attention)]
            .iter()
            .filter(|(_, v)| 100.0 * *v as f64 / (*of as f64) < 4.0)
            .map(|(n, v)| format!("{n} {:.1}%", 100.0 * *v as f64 / *of as f64))
            .collect();
        let title = if small.is_empty() {
            name.to_string()
        } else {
            format!("{name}: {}", small.join(", "))
        };
        chart.draw_series(std::iter::once(Text::new(
            title,
            (0.5, y + 0.93),
            font(LABEL),
        )))?;
        let values = [s.embedding, s.attention, s.ffn];
        let mut start = 0u64;
        for v in values {
            let share = 100.0 * v as f64 / *of as f64;
            let mid = 100.0 * start as f64 / *of as f64 + share / 2.0;
            start += v;
            if share >= 4.0 {
                chart.draw_series(std::iter::once(Text::new(
                    format!("{share:.1}%"),
                    (mid, y + 0.4),
                    font(TICK)
                        .color(&WHITE)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                )))?;
            }
        }
    }
    // The rows leave the band below zero empty for the key.
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
}
