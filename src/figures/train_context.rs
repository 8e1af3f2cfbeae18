//! Chapter 13 figures (context): one per experiment, drawn from the results recorded in
//! `data/train/experiments/<id>/` (a note in place of the chart when they are not).

use super::{Area, DrawResult, Key, LABEL, PANEL, TITLE, font, legend_on_top, mesh, plot, px};
use crate::train::experiments::context::{
    self, ExtrapolationResults, PositionCurve, RouterResults, Scaling, ThetaResults,
};
use crate::train::experiments::recorded_dir;
use plotters::coord::ranged1d::Ranged;
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

/// The vertical dotted lines at multiples of L.
fn draw_marks<X, Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    marks: &[usize],
    train_len: usize,
    (lo, hi): (f64, f64),
) -> DrawResult
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for &m in marks {
        let x = (m * train_len) as f64;
        chart.draw_series(DashedLineSeries::new(
            [(x, lo), (x, hi)],
            3,
            4,
            RGBColor(150, 150, 150).stroke_width(1),
        ))?;
    }
    Ok(())
}

/// The mean cross-entropy of each block of `train_len` positions, at the block's middle.
fn block_means(c: &PositionCurve, train_len: usize) -> Vec<(f64, f64)> {
    (0..c.window_len.div_ceil(train_len))
        .filter_map(|b| {
            let m = c.mean(b * train_len, (b + 1) * train_len)?;
            Some((((b as f64) + 0.5) * train_len as f64, m))
        })
        .collect()
}

/// The padded range of `values`.
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let pad = ((hi - lo) * 0.08).max(0.005);
    (lo - pad, hi + pad)
}

/// Each curve minus `baseline`, block by block of L positions, where the per-bin noise
/// (the text itself, common to every setting) cancels. The key gives each curve's mean
/// difference over `[from·L, to·L)`, the range the chapter quotes.
fn delta_chart(
    root: &Area,
    title: &str,
    curves: &[(String, &PositionCurve, bool)],
    baseline: (&str, &PositionCurve),
    train_len: usize,
    marks: &[usize],
    (from, to): (usize, usize),
) -> DrawResult {
    let (base_name, base) = baseline;
    let base_blocks = block_means(base, train_len);
    let deltas: Vec<Vec<(f64, f64)>> = curves
        .iter()
        .map(|(_, c, _)| {
            block_means(c, train_len)
                .iter()
                .zip(&base_blocks)
                .map(|(&(x, v), &(_, b))| (x, v - b))
                .collect()
        })
        .collect();
    let range = |c: &PositionCurve| c.mean(from * train_len, to * train_len);
    // A curve that coincides with an earlier one somewhere is drawn first and wider, so
    // both stay visible where they meet.
    let under: Vec<bool> = (0..deltas.len())
        .map(|i| {
            (0..i).any(|j| {
                deltas[i]
                    .iter()
                    .zip(&deltas[j])
                    .any(|(a, b)| (a.1 - b.1).abs() < 1e-9)
            })
        })
        .collect();
    let width = |i: usize| if under[i] { 5 } else { 2 };
    let mut keys: Vec<(Key, String)> = vec![(Key::Line(COLORS[0], 1), format!("0 = {base_name}"))];
    for (i, (label, c, dashed)) in curves.iter().enumerate() {
        let color = COLORS[(i + 1) % COLORS.len()];
        let key = if *dashed {
            Key::Dashed(color, width(i))
        } else {
            Key::Line(color, width(i))
        };
        let d = match (range(c), range(base)) {
            (Some(a), Some(b)) => format!(": {}", signed(a - b)),
            _ => String::new(),
        };
        keys.push((key, format!("{label}{d}")));
    }
    let root = root.titled(title, font(TITLE))?;
    let root = root.titled(
        &format!(
            "each point: a block of L positions minus the same block of the zero line; \
             key: the mean over [{}, {}L)",
            if from == 1 {
                "L".to_string()
            } else {
                format!("{from}L")
            },
            to
        ),
        font(LABEL),
    )?;
    let root = legend_on_top(&root, &keys)?;
    let (lo, hi) = span(deltas.iter().flatten().map(|p| p.1).chain([0.0]));
    let max_x = base.window_len as f64;
    let mut chart = plot(&root, "", TITLE)
        .y_label_area_size(px(56.0))
        .build_cartesian_2d(0f64..max_x, lo..hi)?;
    mesh(&mut chart)
        .x_desc(format!("position (L = {train_len})"))
        .y_desc("Δ cross-entropy (nats)")
        .draw()?;
    draw_marks(&mut chart, marks, train_len, (lo, hi))?;
    chart.draw_series(LineSeries::new(
        [(0.0, 0.0), (max_x, 0.0)],
        COLORS[0].stroke_width(1),
    ))?;
    let order = (0..curves.len())
        .filter(|&i| under[i])
        .chain((0..curves.len()).filter(|&i| !under[i]));
    for i in order {
        let (points, dashed) = (&deltas[i], curves[i].2);
        let color = COLORS[(i + 1) % COLORS.len()];
        let style = color.stroke_width(width(i));
        if dashed {
            chart.draw_series(DashedLineSeries::new(points.clone(), 6, 4, style))?;
        } else {
            chart.draw_series(LineSeries::new(points.clone(), style))?;
        }
        chart.draw_series(
            points
                .iter()
                .map(|&p| Circle::new(p, px(3.0), color.filled())),
        )?;
    }
    Ok(())
}

/// A difference in nats with its sign (a true minus).
fn signed(x: f64) -> String {
    if x < 0.0 {
        format!("−{:.3}", -x)
    } else {
        format!("+{x:.3}")
    }
}

/// The base model read to 8L with the trained frequencies: the cross-entropy of each bin of
/// positions, and its mean over each block of L.
pub(super) fn train_direct_extrapolation(root: &Area) -> DrawResult {
    let Some(r) = recorded::<ExtrapolationResults>(root, "train.direct_extrapolation")? else {
        return Ok(());
    };
    let Some(c) = r.curve("base", &Scaling::None) else {
        return Ok(());
    };
    let l = r.sizes.train_len;
    let bins: Vec<(f64, f64)> =
        c.ce.iter()
            .enumerate()
            .map(|(b, &v)| (((b as f64) + 0.5) * c.bin_width as f64, v))
            .collect();
    let blocks = block_means(c, l);
    let (grey, black) = (RGBColor(150, 150, 150), COLORS[0]);
    let root = root.titled(
        "trained at L, read to 8L without scaling: cross-entropy by position",
        font(TITLE),
    )?;
    let root = legend_on_top(
        &root,
        &[
            (
                Key::Line(grey, 1),
                format!("each bin of {} positions", c.bin_width),
            ),
            (
                Key::Line(black, 2),
                format!("mean of each block of L = {l}"),
            ),
        ],
    )?;
    let (lo, hi) = span(c.ce.iter().copied());
    let mut chart = plot(&root, "", TITLE).build_cartesian_2d(0f64..c.window_len as f64, lo..hi)?;
    mesh(&mut chart)
        .x_desc(format!("position (L = {l})"))
        .y_desc("held-out cross-entropy (nats)")
        .draw()?;
    draw_marks(&mut chart, &[1, 2], l, (lo, hi))?;
    chart.draw_series(LineSeries::new(bins, grey.stroke_width(1)))?;
    // Each block's mean as a step across the block.
    for &(x, m) in &blocks {
        let half = l as f64 / 2.0;
        chart.draw_series(LineSeries::new(
            [(x - half, m), (x + half, m)],
            black.stroke_width(3),
        ))?;
    }
    Ok(())
}

/// The base model read to 8L with each scaling, and the 4L fine-tunes (dashed), each as
/// its difference from the base model without scaling.
pub(super) fn train_ntk_yarn(root: &Area) -> DrawResult {
    let Some(r) = recorded::<ExtrapolationResults>(root, "train.ntk_yarn")? else {
        return Ok(());
    };
    let Some(base) = r.curve("base", &Scaling::None) else {
        return Ok(());
    };
    let curves: Vec<_> = r
        .curves
        .iter()
        .filter(|c| !(c.model == "base" && c.scaling == Scaling::None))
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
    delta_chart(
        root,
        "RoPE scalings at inference (s = 8) and after a 4L fine-tune, against no scaling",
        &curves,
        ("base model, no scaling", base),
        r.sizes.train_len,
        &[1, 4],
        (1, 8),
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
    let caption = format!(
        "short text (windows of L = {}): held-out cross-entropy",
        r.sizes.train_len
    );
    let mut chart = plot(root, &caption, TITLE)
        .y_label_area_size(px(8.0))
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
    mesh(&mut chart)
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
        let style = font(LABEL)
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
    let style = |i: usize, frozen: bool| {
        let color = COLORS[(i + 1) % COLORS.len()];
        if frozen {
            Key::Dashed(color, 2)
        } else {
            Key::Line(color, 2)
        }
    };
    let keys: Vec<(Key, String)> = r
        .runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let router = if run.frozen_router {
                "frozen"
            } else {
                "trainable"
            };
            let label = format!("router {router}, lr {}", super::tick(&run.lr));
            (style(i, run.frozen_router), label)
        })
        .collect();
    let body = legend_on_top(root, &keys)?;
    let (left, right) = body.split_horizontally(body.dim_in_pixel().0 / 2);
    for (area, domain, pick) in [
        (&left, "Chinese (the fine-tune's domain)", 2usize),
        (&right, "English (the base's domain)", 1usize),
    ] {
        let value = |e: &(u64, f32, f32)| f64::from(if pick == 2 { e.2 } else { e.1 });
        let (lo, hi) = span(r.runs.iter().flat_map(|run| run.evals.iter().map(value)));
        let mut chart = plot(area, &format!("held-out loss, {domain}"), PANEL)
            .build_cartesian_2d(0f64..steps, lo..hi)?;
        mesh(&mut chart)
            .x_desc("fine-tuning step")
            .y_desc("nats")
            .draw()?;
        for (i, run) in r.runs.iter().enumerate() {
            let color = COLORS[(i + 1) % COLORS.len()];
            let style = color.stroke_width(2);
            let points: Vec<(f64, f64)> =
                run.evals.iter().map(|e| (e.0 as f64, value(e))).collect();
            if run.frozen_router {
                chart.draw_series(DashedLineSeries::new(points.clone(), 6, 4, style))?;
            } else {
                chart.draw_series(LineSeries::new(points.clone(), style))?;
            }
            chart.draw_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, px(2.5), color.filled())),
            )?;
        }
    }
    Ok(())
}

/// After the 4L fine-tunes: the raised base, YaRN and the base model before fine-tuning,
/// each as its difference from the fine-tune with the original base.
pub(super) fn train_rope_theta_finetune(root: &Area) -> DrawResult {
    let Some(r) = recorded::<ThetaResults>(root, "train.rope_theta_finetune")? else {
        return Ok(());
    };
    let Some(original) = r.curves.iter().find(|c| c.model == "long-original") else {
        return Ok(());
    };
    let curves: Vec<_> = r
        .curves
        .iter()
        .filter(|c| c.model != "long-original")
        .map(|c| {
            let label = match c.model.as_str() {
                "base" => "base before fine-tuning".to_string(),
                "long-theta" => format!("4L fine-tune, theta {:.0}", r.raised_theta),
                _ => format!("4L fine-tune, {}", c.scaling.label()),
            };
            (label, c, c.model == "base")
        })
        .collect();
    delta_chart(
        root,
        "after the 4L fine-tune: raised rope_theta and YaRN against the original theta",
        &curves,
        ("4L fine-tune, original theta", original),
        r.sizes.train_len,
        &[1, 4],
        (1, 4),
    )
}
