//! Every figure of the book, one function each, drawn with plotters into SVG.
//! `anatomy figures` (and `anatomy tour`) write them into `figures/`; notebooks show
//! them inline with [`show`]. Text needs a registered font, so the DejaVu Sans face is
//! compiled in: no system font is needed.

use crate::error::{Error, Result};
use crate::long_context::scaling::{self, RopeConfig, RopeScaling};
use crate::position::{decay, rope};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use std::path::{Path, PathBuf};

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// One figure: its file stem, size and drawing function.
pub struct Figure {
    pub name: &'static str,
    pub size: (u32, u32),
    pub draw: fn(&Area) -> DrawResult,
}

/// All figures, in book order.
pub const FIGURES: &[Figure] = &[
    Figure {
        name: "rope_clocks",
        size: (800, 420),
        draw: rope_clocks,
    },
    Figure {
        name: "rope_heatmap",
        size: (800, 460),
        draw: rope_heatmap,
    },
    Figure {
        name: "rope_decay",
        size: (800, 440),
        draw: rope_decay,
    },
    Figure {
        name: "scaling_wavelengths",
        size: (800, 460),
        draw: scaling_wavelengths,
    },
    Figure {
        name: "yarn_ramp",
        size: (800, 420),
        draw: yarn_ramp,
    },
];

fn register_fonts() {
    // Registering twice only overwrites the entry, so this is safe to call per figure.
    let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    let _ = register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold());
}

/// Renders one figure to an SVG string.
pub fn render_svg(name: &str) -> Result<String> {
    let fig = FIGURES
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| Error::Invalid(format!("no figure named {name:?}")))?;
    register_fonts();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, fig.size).into_drawing_area();
        (fig.draw)(&root).map_err(|e| Error::Figure {
            name: name.into(),
            message: e.to_string(),
        })?;
        root.present().map_err(|e| Error::Figure {
            name: name.into(),
            message: e.to_string(),
        })?;
    }
    Ok(svg)
}

/// Writes every figure as `DIR/<name>.svg` and returns the paths.
pub fn write_all(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    FIGURES
        .iter()
        .map(|f| {
            let path = dir.join(format!("{}.svg", f.name));
            std::fs::write(&path, render_svg(f.name)?).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            Ok(path)
        })
        .collect()
}

/// Displays a figure inline in an evcxr (Jupyter) notebook.
pub fn show(name: &str) -> Result<()> {
    let svg = render_svg(name)?;
    println!("EVCXR_BEGIN_CONTENT image/svg+xml\n{svg}\nEVCXR_END_CONTENT");
    Ok(())
}

const D: usize = 128;
const BASE: f64 = 10_000.0;

/// cos(m·θ_i) against position for a fast, a middle and a slow plane.
fn rope_clocks(root: &Area) -> DrawResult {
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
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// cos(m·θ_i) over positions × dimensions (half-split layout: dimension j uses plane j mod 64).
fn rope_heatmap(root: &Area) -> DrawResult {
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
fn rope_decay(root: &Area) -> DrawResult {
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
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    let (a, b) = (fit.log_intercept, fit.log_slope);
    chart
        .draw_series(LineSeries::new(
            dense.iter().map(|&t| (t, a + b * t.ln())),
            RED.stroke_width(2),
        ))?
        .label(format!("fit {a:.1} {b:+.2}·ln τ  (R² {:.2})", fit.log_r2))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    let c = fit.inverse_c;
    chart
        .draw_series(LineSeries::new(
            dense.iter().map(|&t| (t, c / t)),
            BLACK.stroke_width(1),
        ))?
        .label(format!("best C/τ  (R² {:.2})", fit.inverse_r2))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

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
fn scaling_wavelengths(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let original = rope::inv_freq(D, BASE);
    let s = 8.0;
    let pi: Vec<f64> = original.iter().map(|f| f / s).collect();
    let ntk = rope::inv_freq(D, scaling::ntk_base(BASE, s, D));
    let yarn = qwen3_yarn().init(None)?.inv_freq;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Wavelength per plane, ×8 extension from 4096 (d = 128, base 10000)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..63.0, (1f64..1e6).log_scale())?;
    chart
        .configure_mesh()
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
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, 4096.0), (63.0, 4096.0)],
            8,
            5,
            MAGENTA.stroke_width(2),
        ))?
        .label("training length 4096")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MAGENTA.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// YaRN's ramp: the fraction of interpolation each plane gets.
fn yarn_ramp(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let cfg = qwen3_yarn();
    let RopeScaling::Yarn(y) = &cfg.scaling else {
        return Err("not YaRN".into());
    };
    let ramp = scaling::yarn_ramp(y, cfg.theta, D);
    let mut chart = ChartBuilder::on(root)
        .caption(
            "YaRN ramp: 0 = keep the original speed, 1 = interpolate by s",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..63.0, -0.05f64..1.05)?;
    chart
        .configure_mesh()
        .x_desc("plane i")
        .y_desc("ramp r_i")
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            ramp.iter().enumerate().map(|(i, r)| (i as f64, *r)),
            RED.stroke_width(2),
        ))?
        .label("d = 128, base 10000, original 4096, β_fast 32, β_slow 1")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    chart.draw_series(
        ramp.iter()
            .enumerate()
            .map(|(i, r)| Circle::new((i as f64, *r), 3, RED.filled())),
    )?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
