//! Chapter 13 figures (context): one per experiment, drawn from the results recorded in
//! `data/train/experiments/<id>/` (a note in place of the chart when they are not).

use super::{Area, DrawResult, draw_legend, line_key};
use crate::train::experiments::context::{
    self, ExtrapolationResults, PositionCurve, RouterResults, Scaling, ThetaResults,
};
use crate::train::experiments::recorded_dir;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const COLORS: [RGBColor; 7] = [
    RGBColor(20, 20, 20),
    RGBColor(200, 30, 60),
    RGBColor(30, 100, 200),
    RGBColor(40, 150, 60),
    RGBColor(230, 120, 0),
    RGBColor(140, 60, 170),
    RGBColor(0, 150, 160),
];

/// The recorded results of `id`, or the figure says how to record them.
fn recorded<T: serde::de::DeserializeOwned>(
    root: &Area,
    id: &str,
) -> Result<Option<T>, Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    match context::read_results(&recorded_dir(id)) {
        Ok(r) => Ok(Some(r)),
        Err(_) => {
            root.draw(&Text::new(
                format!("not recorded yet: anatomy experiments {id} --record"),
                (20, 40),
                ("sans-serif", 18),
            ))?;
            Ok(None)
        }
    }
}

/// One line per curve: mean held-out cross-entropy of each bin against the bin's middle
/// position, with dotted verticals at `marks` (multiples of L).
fn position_chart(
    area: &Area,
    caption: &str,
    curves: &[(String, &PositionCurve, bool)],
    train_len: usize,
    marks: &[usize],
) -> DrawResult {
    let max_x = curves
        .iter()
        .map(|(_, c, _)| c.window_len)
        .max()
        .unwrap_or(1) as f64;
    let values = curves.iter().flat_map(|(_, c, _)| c.ce.iter().copied());
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let pad = ((hi - lo) * 0.08).max(0.05);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..max_x, (lo - pad)..(hi + pad))?;
    chart
        .configure_mesh()
        .x_desc(format!("position (L = {train_len})"))
        .y_desc("held-out cross-entropy (nats)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    let grey = RGBColor(150, 150, 150);
    for &m in marks {
        let x = (m * train_len) as f64;
        chart.draw_series(DashedLineSeries::new(
            [(x, lo - pad), (x, hi + pad)],
            3,
            4,
            grey.stroke_width(1),
        ))?;
    }
    for (i, (label, c, dashed)) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> =
            c.ce.iter()
                .enumerate()
                .map(|(b, &v)| (((b as f64) + 0.5) * c.bin_width as f64, v))
                .collect();
        let style = color.stroke_width(2);
        if *dashed {
            chart
                .draw_series(DashedLineSeries::new(points, 6, 4, style))?
                .label(label.as_str())
                .legend(line_key(style));
        } else {
            chart
                .draw_series(LineSeries::new(points, style))?
                .label(label.as_str())
                .legend(line_key(style));
        }
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

/// The base model read to 8L with the trained frequencies.
pub(super) fn train_direct_extrapolation(root: &Area) -> DrawResult {
    let Some(r) = recorded::<ExtrapolationResults>(root, "train.direct_extrapolation")? else {
        return Ok(());
    };
    let curves: Vec<_> = r
        .curve("base", &Scaling::None)
        .map(|c| ("no scaling (direct extrapolation)".to_string(), c, false))
        .into_iter()
        .collect();
    position_chart(
        root,
        "trained at L, read to 8L: cross-entropy by position",
        &curves,
        r.sizes.train_len,
        &[1, 2],
    )
}

/// The base model read to 8L with each scaling, and the 4L fine-tunes (dashed).
pub(super) fn train_ntk_yarn(root: &Area) -> DrawResult {
    let Some(r) = recorded::<ExtrapolationResults>(root, "train.ntk_yarn")? else {
        return Ok(());
    };
    let curves: Vec<_> = r
        .curves
        .iter()
        .map(|c| {
            let tuned = c.model != "base";
            let label = if tuned {
                format!("{} after the 4L fine-tune", c.scaling.label())
            } else {
                c.scaling.label()
            };
            (label, c, tuned)
        })
        .collect();
    position_chart(
        root,
        "RoPE scalings at inference (s = 8) and after a 4L fine-tune",
        &curves,
        r.sizes.train_len,
        &[1, 4],
    )
}

/// Short text (windows of L): each model and setting's cross-entropy, as bars.
pub(super) fn train_pi_short(root: &Area) -> DrawResult {
    let Some(r) = recorded::<ExtrapolationResults>(root, "train.pi_short")? else {
        return Ok(());
    };
    let e = &r.short_text;
    let (lo, hi) = e
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x.ce), b.max(x.ce))
        });
    let pad = ((hi - lo) * 0.25).max(0.02);
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!(
                "short text (windows of L = {}): held-out cross-entropy",
                r.sizes.train_len
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(10)
        .build_cartesian_2d((lo - pad)..(hi + pad), 0f64..e.len() as f64)?;
    let labels: Vec<String> = e
        .iter()
        .map(|x| {
            let model = match x.model.as_str() {
                "base" => "base".to_string(),
                m => format!("{} fine-tune", m.trim_start_matches("long-")),
            };
            format!("{model}, {}", x.scaling.label())
        })
        .collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("nats")
        .draw()?;
    for (i, x) in e.iter().enumerate() {
        let color = if matches!(x.scaling, Scaling::Pi { .. }) {
            COLORS[1]
        } else {
            COLORS[2]
        };
        let y = i as f64;
        chart.draw_series([Rectangle::new(
            [(lo - pad, y + 0.15), (x.ce, y + 0.85)],
            color.mix(0.35).filled(),
        )])?;
        // The bar's name inside it, at its left end (a label formatter would leave empty
        // text elements between the bars).
        let style = ("sans-serif", 14)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        chart.draw_series([Text::new(
            format!("{}: {:.4}", labels[i], x.ce),
            (lo - pad * 0.95, y + 0.5),
            style,
        )])?;
    }
    Ok(())
}

/// Held-out loss of both domains while the English base is fine-tuned on Chinese.
pub(super) fn train_finetune_router(root: &Area) -> DrawResult {
    let Some(r) = recorded::<RouterResults>(root, "train.finetune_router")? else {
        return Ok(());
    };
    let steps = r.sizes.router_steps as f64;
    let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);
    for (area, domain, pick) in [
        (&left, "Chinese (the fine-tune's domain)", 2usize),
        (&right, "English (the base's domain)", 1usize),
    ] {
        let value = |e: &(u64, f32, f32)| f64::from(if pick == 2 { e.2 } else { e.1 });
        let all = r.runs.iter().flat_map(|run| run.evals.iter().map(value));
        let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
        let pad = ((hi - lo) * 0.08).max(0.05);
        let mut chart = ChartBuilder::on(area)
            .caption(format!("held-out loss, {domain}"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..steps, (lo - pad)..(hi + pad))?;
        chart
            .configure_mesh()
            .x_desc("fine-tuning step")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()?;
        for (i, run) in r.runs.iter().enumerate() {
            let color = COLORS[(i + 1) % COLORS.len()];
            let style = color.stroke_width(2);
            let points: Vec<(f64, f64)> =
                run.evals.iter().map(|e| (e.0 as f64, value(e))).collect();
            let label = format!(
                "router {}, lr {:e}",
                if run.frozen_router {
                    "frozen"
                } else {
                    "trainable"
                },
                run.lr
            );
            let series = if run.frozen_router {
                chart.draw_series(DashedLineSeries::new(points, 6, 4, style))?
            } else {
                chart.draw_series(LineSeries::new(points, style))?
            };
            series.label(label).legend(line_key(style));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    Ok(())
}

/// After the 4L fine-tunes: cross-entropy by position with the original base, a raised
/// base and YaRN (and the base model before fine-tuning).
pub(super) fn train_rope_theta_finetune(root: &Area) -> DrawResult {
    let Some(r) = recorded::<ThetaResults>(root, "train.rope_theta_finetune")? else {
        return Ok(());
    };
    let curves: Vec<_> = r
        .curves
        .iter()
        .map(|c| {
            let label = match c.model.as_str() {
                "base" => "base before fine-tuning".to_string(),
                "long-original" => "4L fine-tune, original theta".to_string(),
                "long-theta" => format!("4L fine-tune, theta {:.0}", r.raised_theta),
                _ => format!("4L fine-tune, {}", c.scaling.label()),
            };
            (label, c, c.model == "base")
        })
        .collect();
    position_chart(
        root,
        "long-text fine-tune: original vs raised rope_theta vs YaRN",
        &curves,
        r.sizes.train_len,
        &[1, 4],
    )
}
