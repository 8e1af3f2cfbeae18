//! Chapter 11's figure: reconstruction error against bits per weight for every block
//! type, on Gaussian and heavy-tailed rows, measured with the crate's quantisers
//! ([`crate::params::quant_error`]).

use super::{Area, DrawResult, Key, LABEL, TITLE, font, legend_on_top, mesh, plot, px, text_size};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// RMSE / RMS of each type on a seeded Gaussian row and a Student-t (ν = 3) row of 16,384
/// weights, against its bits per weight, both on log axes; each type named once, beside its
/// Gaussian point or, where the types crowd, at the end of a leader line.
pub(super) fn quant_error(root: &Area) -> DrawResult {
    use crate::params::quant_error::{STUDENT_NU, error_table};
    root.fill(&WHITE)?;
    let table = error_table();
    let bits = (4f64..18.0)
        .log_scale()
        .with_key_points(vec![4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0]);
    let series = [
        ("Gaussian weights".to_string(), RGBColor(0, 114, 178), false),
        (
            format!("Student-t weights (heavy tails), ν = {STUDENT_NU}"),
            RGBColor(213, 94, 0),
            true,
        ),
    ];
    let body = root.titled(
        "Quantise, dequantise, compare: RMSE relative to the weights' RMS",
        font(TITLE),
    )?;
    let keys: Vec<(Key, String)> = series
        .iter()
        .map(|(label, color, _)| (Key::Dot(*color), label.clone()))
        .collect();
    let body = legend_on_top(&body, &keys)?;
    let mut chart = plot(&body, "", TITLE)
        .y_label_area_size(px(56.0))
        .build_cartesian_2d(bits, (1e-4f64..0.3).log_scale())?;
    mesh(&mut chart)
        .x_desc("bits per weight (scales included; log scale)")
        .y_desc("RMSE / RMS (log scale)")
        .draw()?;
    let radius = px(4.5);
    for (_, color, heavy) in &series {
        let value = |p: &crate::params::quant_error::ErrorPoint| {
            if *heavy { p.student_t } else { p.gaussian }
        };
        chart.draw_series(
            table
                .iter()
                .map(|p| Circle::new((p.bits_per_weight, value(p)), radius, color.filled())),
        )?;
    }
    // Every point is an obstacle; each name takes the first free spot nearest its point.
    let style = font(LABEL).into_text_style(root);
    let style = style.pos(Pos::new(HPos::Left, VPos::Center));
    let r = radius + 2;
    let mut taken: Vec<Rect> = table
        .iter()
        .flat_map(|p| [p.gaussian, p.student_t].map(|v| (p.bits_per_weight, v)))
        .map(|c| {
            let (x, y) = chart.backend_coord(&c);
            Rect::new(x - r, y - r, x + r, y + r)
        })
        .collect();
    let area = chart.plotting_area().get_pixel_range();
    let frame = Rect::new(area.0.start, area.1.start, area.0.end, area.1.end);
    let mut order: Vec<&crate::params::quant_error::ErrorPoint> = table.iter().collect();
    order.sort_by(|a, b| a.bits_per_weight.total_cmp(&b.bits_per_weight));
    for p in order {
        let name = p.ty.name();
        let (w, h) = text_size(root, name, &style)?;
        let (x, y) = chart.backend_coord(&(p.bits_per_weight, p.gaussian));
        let spot = label_spots(r, w, h)
            .map(|(dx, dy)| Rect::new(x + dx, y + dy - h / 2, x + dx + w, y + dy + h / 2))
            .find(|b| frame.contains(b) && taken.iter().all(|t| !t.overlaps(b)))
            .ok_or_else(|| format!("no room for the label {name}"))?;
        let left = spot.x0 >= x;
        let anchor = (
            if left { spot.x0 - 2 } else { spot.x1 + 2 },
            (spot.y0 + spot.y1) / 2,
        );
        if (anchor.0 - x).abs() > 2 * r || (anchor.1 - y).abs() > r {
            // A leader line from the point's edge to the label.
            let (dx, dy) = ((anchor.0 - x) as f64, (anchor.1 - y) as f64);
            let len = dx.hypot(dy);
            let edge = (
                x + (dx / len * r as f64) as i32,
                y + (dy / len * r as f64) as i32,
            );
            root.draw(&PathElement::new(vec![edge, anchor], BLACK.mix(0.6)))?;
        }
        root.draw(&Text::new(
            name,
            (spot.x0, (spot.y0 + spot.y1) / 2),
            style.clone(),
        ))?;
        taken.push(spot.grow(2));
    }
    Ok(())
}

/// Candidate offsets of a label's left edge from its point, nearest first: right, left,
/// then out along the diagonals and straight up and down (where a leader line is drawn).
fn label_spots(r: i32, w: i32, h: i32) -> impl Iterator<Item = (i32, i32)> {
    let near = [(r + 2, 0), (-r - 2 - w, 0)];
    let far = (1..=8).flat_map(move |k| {
        let d = k * (h + 2);
        [
            (r + d, -d),
            (r + d, d),
            (-r - d - w, -d),
            (-r - d - w, d),
            (r + 2 * d, 0),
            (-r - 2 * d - w, 0),
        ]
    });
    near.into_iter().chain(far)
}

/// A pixel box.
#[derive(Clone, Copy)]
struct Rect {
    x0: i32,
    y0: i32,
    x1: i32,
    y1: i32,
}

impl Rect {
    fn new(x0: i32, y0: i32, x1: i32, y1: i32) -> Rect {
        Rect { x0, y0, x1, y1 }
    }
    fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
    fn contains(&self, o: &Rect) -> bool {
        o.x0 >= self.x0 && o.x1 <= self.x1 && o.y0 >= self.y0 && o.y1 <= self.y1
    }
    fn grow(&self, by: i32) -> Rect {
        Rect::new(self.x0 - by, self.y0 - by, self.x1 + by, self.y1 + by)
    }
}
