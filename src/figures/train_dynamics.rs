//! Chapter 13 figures (dynamics): one per experiment, drawn from the results recorded in
//! `data/train/experiments/<id>/` (a note in the frame until they are recorded).

use super::{
    Area, DrawResult, Key, PANEL, TITLE, draw_legend, font, legend_on_top, line_key, mesh, plot, px,
};
use crate::train::experiments::dynamics::{
    RunRecord, collapse, glitch, max_logit, muon, read_results,
};
use crate::train::experiments::recorded_dir;
use plotters::prelude::*;

const COLORS: [RGBColor; 4] = [
    RGBColor(30, 100, 200),
    RGBColor(230, 120, 0),
    RGBColor(40, 150, 60),
    RGBColor(200, 30, 60),
];
const GREY: RGBColor = RGBColor(120, 120, 120);

/// The recorded results of `id`, or `None` after drawing a note saying how to record them.
fn recorded_or_note<T: for<'de> serde::Deserialize<'de>>(
    root: &Area,
    id: &str,
) -> std::result::Result<Option<T>, Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    match read_results::<T>(&recorded_dir(id))? {
        Some(r) => Ok(Some(r)),
        None => {
            let h = root.dim_in_pixel().1;
            root.draw(&Text::new(
                format!("{id}: not recorded yet — anatomy experiments {id} --record"),
                (20, h as i32 / 2),
                font(PANEL),
            ))?;
            Ok(None)
        }
    }
}

fn steps_of(runs: &[RunRecord]) -> f64 {
    runs.iter().map(|r| r.steps_done).max().unwrap_or(1).max(1) as f64
}

/// Per run (one panel each), every MoE layer's busiest-expert share ÷ the mean share over
/// each 10-step window, with the rule's lines at 3× (collapse) and 2× (even).
pub(super) fn train_collapse(root: &Area) -> DrawResult {
    let Some(r) = recorded_or_note::<collapse::CollapseResults>(root, collapse::ID)? else {
        return Ok(());
    };
    let steps = steps_of(&r.runs);
    let layers = r
        .runs
        .iter()
        .filter_map(|run| run.log.first().map(|s| s.expert_counts.len()))
        .max()
        .unwrap_or(0);
    let mut keys: Vec<(Key, String)> = (0..layers)
        .map(|l| (Key::Line(COLORS[l % COLORS.len()], 2), format!("layer {l}")))
        .collect();
    keys.push((Key::Dashed(BLACK, 1), "collapse (3×)".to_string()));
    keys.push((Key::Dashed(GREY, 1), "even (≤ 2×)".to_string()));
    let body = legend_on_top(root, &keys)?;
    // The first panel is wider by the axis description the others leave out.
    let n = r.runs.len().max(1) as i32;
    let extra = px(22.0);
    let w = body.dim_in_pixel().0 as i32;
    let mut panels = Vec::new();
    let mut rest = body;
    for k in 0..n - 1 {
        let cut = (w - extra) / n + if k == 0 { extra } else { 0 };
        let (panel, next) = rest.split_horizontally(cut);
        panels.push(panel);
        rest = next;
    }
    panels.push(rest);
    for (k, (run, panel)) in r.runs.iter().zip(&panels).enumerate() {
        let mut chart = plot(panel, &run.name, PANEL)
            .y_label_area_size(px(if k == 0 { 48.0 } else { 26.0 }))
            .build_cartesian_2d(0f64..steps, 0.8f64..4.1)?;
        let mut m = mesh(&mut chart);
        m.x_labels(6).x_desc("step");
        if k == 0 {
            m.y_desc("busiest expert ÷ mean load");
        }
        m.draw()?;
        let layers = run.log.first().map_or(0, |s| s.expert_counts.len());
        for layer in 0..layers {
            let color = COLORS[layer % COLORS.len()];
            let points = run.log.iter().filter_map(|s| {
                let loads = collapse::layer_loads(&s.expert_counts);
                loads.get(layer).map(|l| (s.step as f64, l.max_ratio))
            });
            chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
        }
        for (y, color) in [
            (collapse::COLLAPSE_RATIO, BLACK),
            (collapse::EVEN_RATIO, GREY),
        ] {
            chart.draw_series(DashedLineSeries::new(
                [(0.0, y), (steps, y)],
                6,
                4,
                color.stroke_width(1),
            ))?;
        }
    }
    Ok(())
}

/// Left: the sweep's final held-out loss against the learning rate, per optimiser.
/// Right: held-out loss over training of the full runs, every seed.
pub(super) fn train_muon(root: &Area) -> DrawResult {
    let Some(r) = recorded_or_note::<muon::MuonResults>(root, muon::ID)? else {
        return Ok(());
    };
    let (adamw, muon_color) = (COLORS[0], COLORS[3]);
    let body = legend_on_top(
        root,
        &[
            (Key::Line(adamw, 2), "AdamW alone".to_string()),
            (Key::Line(muon_color, 2), "Muon + AdamW".to_string()),
        ],
    )?;
    let (left, right) = body.split_horizontally(body.dim_in_pixel().0 * 2 / 5);
    let heldout = |run: &RunRecord| -> Vec<(f64, f64)> {
        run.log
            .iter()
            .filter_map(|s| s.heldout_loss.map(|h| (s.step as f64, f64::from(h))))
            .filter(|p| p.1.is_finite())
            .collect()
    };
    let all: Vec<f64> = r
        .sweep
        .iter()
        .chain(&r.runs)
        .flat_map(|x| heldout(x).into_iter().map(|p| p.1))
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min) - 0.1;
    let hi = all.iter().copied().fold(f64::NEG_INFINITY, f64::max) + 0.1;
    let sweep_last = |m: bool| -> Vec<(f64, f64)> {
        r.sweep
            .iter()
            .filter(|x| x.options.muon == m)
            .filter_map(|x| {
                let lr = if m {
                    x.options.muon_lr
                } else {
                    x.options.adamw_lr
                };
                x.final_heldout().map(|h| (lr, f64::from(h)))
            })
            .filter(|p| p.1.is_finite())
            .collect()
    };
    let swept: Vec<(f64, f64)> = [false, true].iter().flat_map(|&m| sweep_last(m)).collect();
    let (sweep_lo, sweep_hi) = swept
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.1), b.max(p.1))
        });
    // The axis spans every rate swept, with a tick at each.
    let mut rates: Vec<f64> = swept.iter().map(|p| p.0).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let (lr_lo, lr_hi) = (rates[0] / 1.5, rates[rates.len() - 1] * 1.5);
    let mut chart = plot(
        &left,
        &format!("sweep: held-out loss after {} steps", r.sweep_budget.steps),
        PANEL,
    )
    .build_cartesian_2d(
        (lr_lo..lr_hi).log_scale().with_key_points(rates),
        sweep_lo - 0.05..sweep_hi + 0.05,
    )?;
    mesh(&mut chart)
        .x_desc("peak learning rate (log scale)")
        .y_desc("held-out loss (nats)")
        .draw()?;
    for (m, color) in [(false, adamw), (true, muon_color)] {
        let points = sweep_last(m);
        chart.draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(2),
        ))?;
        chart.draw_series(
            points
                .iter()
                .map(|&p| Circle::new(p, px(3.5), color.filled())),
        )?;
    }

    let steps = steps_of(&r.runs);
    let caption = format!(
        "held-out loss, {} seeds each (AdamW lr {}, Muon lr {})",
        r.runs.len() / 2,
        super::tick(&r.best_adamw_lr),
        super::tick(&r.best_muon_lr)
    );
    let mut chart = plot(&right, &caption, PANEL).build_cartesian_2d(0f64..steps, lo..hi)?;
    mesh(&mut chart)
        .x_desc("step (equal tokens per step)")
        .y_desc("held-out loss (nats)")
        .draw()?;
    for run in &r.runs {
        let color = if run.options.muon { muon_color } else { adamw };
        chart.draw_series(LineSeries::new(heldout(run), color.stroke_width(2)))?;
    }
    Ok(())
}

/// The largest attention logit of each 10-step window for the three runs, with τ.
pub(super) fn train_max_logit(root: &Area) -> DrawResult {
    let Some(r) = recorded_or_note::<max_logit::MaxLogitResults>(root, max_logit::ID)? else {
        return Ok(());
    };
    let steps = steps_of(&r.runs);
    let top = r
        .runs
        .iter()
        .flat_map(|x| x.log.iter().map(|s| f64::from(s.max_logit)))
        .filter(|x| x.is_finite())
        .fold(f64::from(max_logit::TAU), f64::max)
        * 1.1;
    let mut chart = plot(
        root,
        &format!(
            "largest attention logit per 10 steps, peak lr {}",
            super::tick(&max_logit::LR)
        ),
        TITLE,
    )
    .build_cartesian_2d(0f64..steps, 0f64..top)?;
    mesh(&mut chart)
        .x_desc("step")
        .y_desc("max logit q·k/√d")
        .draw()?;
    for (i, run) in r.runs.iter().enumerate() {
        let color = COLORS[[3, 1, 0][i % 3]];
        let points = run
            .log
            .iter()
            .map(|s| (s.step as f64, f64::from(s.max_logit)))
            .filter(|p| p.1.is_finite());
        let label = match &run.diverged {
            Some(_) => format!("{} (diverged at step {})", run.name, run.steps_done + 1),
            None => run.name.clone(),
        };
        // The first run underneath and wider: runs that never reach τ coincide with it.
        let width = if i == 0 { 5 } else { 2 };
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(width)))?
            .label(label)
            .legend(line_key(color.stroke_width(width)));
    }
    let tau = f64::from(max_logit::TAU);
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, tau), (steps, tau)],
            6,
            4,
            GREY.stroke_width(1),
        ))?
        .label(format!("τ = {tau}"))
        .legend(line_key(GREY.stroke_width(1)));
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

/// Left: median input-embedding norm of absent and present tokens over training, tied and
/// untied, with what weight decay alone does to an absent row. Right: the final norms'
/// histograms (log scale) for the untied run, absent vs present.
pub(super) fn train_glitch(root: &Area) -> DrawResult {
    let Some(r) = recorded_or_note::<glitch::GlitchResults>(root, glitch::ID)? else {
        return Ok(());
    };
    let body = legend_on_top(root, &glitch_keys(&r))?;
    let (left, right) = body.split_horizontally(body.dim_in_pixel().0 / 2);
    draw_glitch_norms(&left, &r)?;
    match r.runs.iter().find(|g| !g.run.tie_word_embeddings) {
        Some(g) => draw_glitch_histograms(&right, &r, g),
        None => Ok(()),
    }
}

/// One key for both panels: the right one draws the untied run in the same styles.
fn glitch_keys(r: &glitch::GlitchResults) -> Vec<(Key, String)> {
    let mut keys = Vec::new();
    for g in &r.runs {
        let tied = g.run.tie_word_embeddings;
        for (k, what) in [(0, "absent"), (1, "present")] {
            let color = COLORS[if k == 0 { 3 } else { 0 }];
            let name = format!("{what}, {}", if tied { "tied" } else { "untied" });
            let key = if tied {
                Key::Dashed(color, 1)
            } else {
                Key::Line(color, 2)
            };
            keys.push((key, name));
        }
    }
    keys.push((Key::Dashed(BLACK, 1), "weight decay alone".to_string()));
    keys
}

/// Run `g`'s probe `k` (0 absent, 1 present) per step, from its initial value.
fn probe_curve(g: &glitch::GlitchRun, k: usize) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = g
        .run
        .initial_probe
        .get(k)
        .map(|&x| (0.0, f64::from(x)))
        .into_iter()
        .collect();
    v.extend(
        g.run
            .log
            .iter()
            .filter_map(|s| s.probe.get(k).map(|&x| (s.step as f64, f64::from(x)))),
    );
    v
}

/// Left panel: the median row norm of either class per step, and weight decay alone.
fn draw_glitch_norms(area: &Area, r: &glitch::GlitchResults) -> DrawResult {
    let runs: Vec<&RunRecord> = r.runs.iter().map(|g| &g.run).collect();
    let steps = runs.iter().map(|x| x.steps_done).max().unwrap_or(1).max(1) as f64;
    let top = r
        .runs
        .iter()
        .flat_map(|g| (0..2).flat_map(move |k| probe_curve(g, k).into_iter().map(|p| p.1)))
        .fold(0.0, f64::max)
        * 1.15;
    let mut chart = plot(area, "median input-embedding row norm", PANEL)
        .build_cartesian_2d(0f64..steps, 0f64..top.max(0.01))?;
    mesh(&mut chart).x_desc("step").y_desc("L2 norm").draw()?;
    for g in &r.runs {
        for k in 0..2 {
            let color = COLORS[if k == 0 { 3 } else { 0 }];
            if g.run.tie_word_embeddings {
                chart.draw_series(DashedLineSeries::new(
                    probe_curve(g, k),
                    5,
                    3,
                    color.stroke_width(1),
                ))?;
            } else {
                chart.draw_series(LineSeries::new(probe_curve(g, k), color.stroke_width(2)))?;
            }
        }
    }
    if let Some(g) = r.runs.iter().find(|g| !g.run.tie_word_embeddings) {
        // p ← p·(1 − lr_t·λ) from the untied run's initial absent median.
        let o = &g.run.options;
        let schedule = o.schedule()?;
        let mut norm = f64::from(g.absent_initial_median);
        let mut points = vec![(0.0, norm)];
        for t in 0..g.run.steps_done {
            norm *= 1.0 - o.adamw_lr * schedule.factor(t) * o.weight_decay;
            points.push(((t + 1) as f64, norm));
        }
        chart.draw_series(DashedLineSeries::new(points, 2, 3, BLACK.stroke_width(1)))?;
    }

    Ok(())
}

/// Right panel: the untied run `g`'s final norms, a histogram per class.
fn draw_glitch_histograms(
    area: &Area,
    r: &glitch::GlitchResults,
    g: &glitch::GlitchRun,
) -> DrawResult {
    let width = f64::from(glitch::HIST_HI - glitch::HIST_LO) / glitch::HIST_BINS as f64;
    let share = |h: &[usize]| -> Vec<(f64, f64)> {
        let total = h.iter().sum::<usize>().max(1) as f64;
        h.iter()
            .enumerate()
            .map(|(i, &c)| {
                let x = f64::from(glitch::HIST_LO) + (i as f64 + 0.5) * width;
                (10f64.powf(x), c as f64 / total)
            })
            .collect()
    };
    let (absent, present) = (share(&g.hist_absent), share(&g.hist_present));
    let peak = absent
        .iter()
        .chain(&present)
        .map(|p| p.1)
        .fold(0.0, f64::max)
        * 1.1;
    let caption = format!(
        "untied run, final norms ({} absent tokens)",
        super::tick(&(r.absent_tokens as f64))
    );
    let mut chart = plot(area, &caption, PANEL).build_cartesian_2d(
        (10f64.powf(f64::from(glitch::HIST_LO))..10f64.powf(f64::from(glitch::HIST_HI)))
            .log_scale(),
        0f64..peak.max(0.01),
    )?;
    mesh(&mut chart)
        .x_desc("row L2 norm (log scale)")
        .y_desc("share of the class")
        .draw()?;
    for (points, color) in [(absent, COLORS[3]), (present, COLORS[0])] {
        chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
    }
    Ok(())
}
