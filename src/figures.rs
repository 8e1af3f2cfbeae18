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
    Figure {
        name: "tok_embedding_norms",
        size: (820, 440),
        draw: tok_embedding_norms,
    },
    Figure {
        name: "tok_vocab_lengths",
        size: (820, 440),
        draw: tok_vocab_lengths,
    },
    Figure {
        name: "moe_balance",
        size: (1200, 420),
        draw: moe_balance,
    },
    Figure {
        name: "param_shares",
        size: (860, 400),
        draw: param_shares,
    },
    Figure {
        name: "newton_schulz_map",
        size: (800, 440),
        draw: newton_schulz_map,
    },
    Figure {
        name: "muon_demo",
        size: (1000, 440),
        draw: muon_demo,
    },
    Figure {
        name: "muon_sweep",
        size: (800, 440),
        draw: muon_sweep,
    },
    Figure {
        name: "qwen3_word_experts",
        size: (1000, 420),
        draw: qwen3_word_experts,
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

/// The legend box every chart uses: translucent white, black border.
fn draw_legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
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
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
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
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
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
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
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
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

/// Shares of embedding / attention / FFN-or-MoE / norms in Qwen3-30B-A3B (total and
/// active) and Qwen3-32B, as stacked horizontal bars.
fn param_shares(root: &Area) -> DrawResult {
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
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Where the parameters are: total vs active",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(10)
        .build_cartesian_2d(0f64..100.0, -1.2f64..3.0)?;
    chart
        .configure_mesh()
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
            ("sans-serif", 15),
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
                    ((mid - 2.5).max(0.3), y + 0.47),
                    ("sans-serif", 14).into_font().color(&WHITE),
                )))?;
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Expert load over training steps of the simulated router: none, auxiliary loss,
/// DeepSeek-V3 bias.
fn moe_balance(root: &Area) -> DrawResult {
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

/// Histogram of `values` in `bins` equal bins over `[lo, hi)`: the counts.
fn histogram(values: impl Iterator<Item = f64>, lo: f64, hi: f64, bins: usize) -> Vec<u64> {
    let mut h = vec![0u64; bins];
    for v in values {
        let b = (((v - lo) / (hi - lo)) * bins as f64).floor();
        h[(b.max(0.0) as usize).min(bins - 1)] += 1;
    }
    h
}

/// Source 5.3.4 on the synthetic checkpoint: L2 norms of the embedding rows, log y; the
/// rows training never saw (red) sit in a spike at their initial norm, far left.
fn tok_embedding_norms(root: &Area) -> DrawResult {
    use crate::tokenizer::glitch;
    root.fill(&WHITE)?;
    let dir = glitch::synthetic_dir();
    let ckpt = crate::checkpoint::Checkpoint::open(&dir)?;
    let info = ckpt.info("model.embed_tokens.weight")?;
    let embed = ckpt.matrix("model.embed_tokens.weight", info.shape[0], info.shape[1])?;
    let norms = glitch::row_norms(&embed);
    let never: std::collections::HashSet<u32> =
        glitch::synthetic_never_seen()?.into_iter().collect();
    let hi = norms.iter().copied().fold(0.0f32, f32::max) as f64 * 1.05;
    let bins = 60;
    let split = |seen: bool| {
        histogram(
            norms
                .iter()
                .enumerate()
                .filter(|(i, _)| never.contains(&(*i as u32)) != seen)
                .map(|(_, &n)| n as f64),
            0.0,
            hi,
            bins,
        )
    };
    let (trained, untrained) = (split(true), split(false));
    let top = trained.iter().chain(&untrained).copied().max().unwrap_or(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Embedding L2 norms, synthetic checkpoint (log y)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..hi, (0.8f64..top * 2.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("L2 norm of the embedding row")
        .y_desc("rows")
        .draw()?;
    let w = hi / bins as f64;
    for (h, color, label) in [
        (
            &trained,
            BLUE,
            format!("seen in training ({} rows)", norms.len() - never.len()),
        ),
        (
            &untrained,
            RED,
            format!("never seen: kept the initial norm ({} rows)", never.len()),
        ),
    ] {
        chart
            .draw_series(
                h.iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, &c)| {
                        Rectangle::new(
                            [(i as f64 * w, 0.8), ((i as f64 + 1.0) * w, c as f64)],
                            color.mix(0.7).filled(),
                        )
                    }),
            )?
            .label(label)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.mix(0.7).filled())
            });
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// Length of every token of the real Qwen vocabulary, in characters and in bytes (log y).
fn tok_vocab_lengths(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let tok = crate::tokenizer::Tokenizer::qwen()?;
    let max_len = 80usize;
    let mut chars = vec![0u64; max_len + 1];
    let mut bytes = vec![0u64; max_len + 1];
    for (_, b) in tok.vocab.iter() {
        let c = String::from_utf8_lossy(b).chars().count();
        chars[c.min(max_len)] += 1;
        bytes[b.len().min(max_len)] += 1;
    }
    let top = chars.iter().chain(&bytes).copied().max().unwrap_or(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Token lengths in Qwen's vocabulary (151,643 ranks; log y; ≥ 80 pooled)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..(max_len + 1) as f64, (0.8f64..top * 2.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("length of the token")
        .y_desc("tokens")
        .draw()?;
    for (h, color, label) in [
        (&bytes, BLUE, "bytes"),
        (
            &chars,
            RED,
            "characters (decoded, U+FFFD for partial UTF-8)",
        ),
    ] {
        chart
            .draw_series(LineSeries::new(
                h.iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, &c)| (i as f64, c as f64)),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .draw_series(LineSeries::new(
            [(20.5, 0.8), (20.5, top * 2.0)],
            BLACK.mix(0.5),
        ))?
        .label("the literal scan keeps > 20 characters")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

// ------------------------------------------------------------------ chapter 7: optimisers

/// What Newton–Schulz does to one singular value: the quintic p applied 1…5 times to
/// x = σ/‖G‖_F, on a log axis from 10⁻³ to 1.
fn newton_schulz_map(root: &Area) -> DrawResult {
    use crate::optim::muon::{NS_COEFFICIENTS, ns_polynomial};
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Newton–Schulz on one singular value: p(x) = 3.4445x − 4.7750x³ + 2.0315x⁵, iterated",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((1e-3f64..1.0).log_scale(), 0f64..1.35)?;
    chart
        .configure_mesh()
        .x_desc("normalised singular value x = σ / ‖G‖_F (log scale)")
        .y_desc("after k steps")
        .draw()?;
    let xs: Vec<f64> = (0..=400)
        .map(|i| 10f64.powf(-3.0 + 3.0 * i as f64 / 400.0))
        .collect();
    let colors = [
        RGBColor(200, 200, 240),
        RGBColor(150, 150, 230),
        RGBColor(100, 100, 220),
        RGBColor(50, 50, 200),
        RED,
    ];
    for (k, color) in (1..=5).zip(colors) {
        let points = xs.iter().map(|&x| {
            let mut y = x;
            for _ in 0..k {
                y = ns_polynomial(y, NS_COEFFICIENTS);
            }
            (x, y)
        });
        let width = if k == 5 { 3 } else { 2 };
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(width)))?
            .label(format!("{k} step{}", if k == 1 { "" } else { "s" }))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
    }
    chart
        .draw_series(LineSeries::new([(1e-3, 1.0), (1.0, 1.0)], BLACK.mix(0.5)))?
        .label("exact polar factor UVᵀ (every σ → 1)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

const OPT_COLORS: [RGBColor; 3] = [
    RGBColor(230, 120, 0),
    RGBColor(30, 100, 200),
    RGBColor(200, 30, 60),
];

/// Held-out loss against steps for SGD-momentum, Adam and Muon at their tuned learning
/// rates: left the 1 000-step budget, right the 300-step one.
fn muon_demo(root: &Area) -> DrawResult {
    use crate::optim::demo;
    root.fill(&WHITE)?;
    let (long, short) = demo::book_runs();
    let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);
    for (area, run) in [(&left, long), (&right, short)] {
        let steps = run.config.eval_steps();
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "{} steps: {} ends lowest",
                    run.config.steps,
                    run.winner().kind.name()
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..run.config.steps as f64, (5e-3f64..5.0).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("step")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_desc("held-out MSE (mean of 3 seeds)")
            .draw()?;
        for (s, color) in run.sweeps.iter().zip(OPT_COLORS) {
            chart
                .draw_series(LineSeries::new(
                    steps
                        .iter()
                        .zip(&s.best_curve)
                        .map(|(&t, &l)| (t as f64, l.max(5e-3))),
                    color.stroke_width(2),
                ))?
                .label(format!(
                    "{}, lr {} → {:.4}",
                    s.kind.name(),
                    s.best_lr,
                    s.best_final
                ))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    Ok(())
}

/// Final held-out loss against learning rate for each optimizer (1 000 steps solid,
/// 300 steps dashed): the tuned rate of each is the minimum of its curve.
fn muon_sweep(root: &Area) -> DrawResult {
    use crate::optim::demo;
    root.fill(&WHITE)?;
    let (long, short) = demo::book_runs();
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Learning-rate sweeps: final held-out MSE (solid 1 000 steps, dashed 300)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1e-3f64..10.0).log_scale(), (5e-3f64..5.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("learning rate (log scale)")
        .y_desc("final held-out MSE")
        .draw()?;
    for (run, dashed) in [(long, false), (short, true)] {
        for (s, color) in run.sweeps.iter().zip(OPT_COLORS) {
            // Diverged runs (NaN) are left out of the line.
            let points: Vec<(f64, f64)> = s
                .lrs
                .iter()
                .zip(&s.final_losses)
                .filter(|(_, l)| l.is_finite())
                .map(|(&lr, &l)| (lr, l.clamp(5e-3, 5.0)))
                .collect();
            if dashed {
                chart.draw_series(DashedLineSeries::new(
                    points.clone(),
                    6,
                    4,
                    color.stroke_width(2),
                ))?;
            } else {
                chart
                    .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                    .label(s.kind.name())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
            }
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

/// Chapter 9: which experts each word class goes to in the bundled tiny Qwen3-MoE (trained
/// on a toy grammar), one heatmap per MoE layer; cells give the share of the class's
/// expert slots in percent.
fn qwen3_word_experts(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let (config, ckpt) = crate::qwen3::open(&crate::qwen3::bundled_dir())?;
    let model = crate::qwen3::Model::new(config, &ckpt)?;
    let tok = crate::tokenizer::Tokenizer::qwen()?;
    let r = crate::qwen3::word_class_routing(&model, &tok)?;
    let (title, body) = root.split_vertically(40);
    title.titled(
        "Bundled tiny Qwen3-MoE: share of each word class's expert slots (%), held-out toy-grammar text",
        ("sans-serif", 18),
    )?;
    let panels = body.split_evenly((1, r.layers.len()));
    let classes = r.classes.clone();
    for (panel, (layer, shares)) in panels.iter().zip(&r.layers) {
        let experts = shares.first().map_or(0, Vec::len);
        let names = classes.clone();
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("layer {layer} (colour: 0 → 50%)"),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(100)
            // A segmented range a..b has b − a + 1 cells.
            .build_cartesian_2d(
                (0..experts - 1).into_segmented(),
                (0..classes.len() - 1).into_segmented(),
            )?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("expert")
            .y_desc("word class")
            .x_labels(experts)
            .y_labels(classes.len())
            .x_label_formatter(&|e| match e {
                SegmentValue::CenterOf(e) => format!("e{e}"),
                _ => String::new(),
            })
            .y_label_formatter(&|c| match c {
                SegmentValue::CenterOf(c) => names.get(*c).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()?;
        chart.draw_series(shares.iter().enumerate().flat_map(|(c, row)| {
            row.iter().enumerate().map(move |(e, &x)| {
                let color = ViridisRGB::get_color((x / 0.5).min(1.0) as f32);
                Rectangle::new(
                    [
                        (SegmentValue::Exact(e), SegmentValue::Exact(c)),
                        (SegmentValue::Exact(e + 1), SegmentValue::Exact(c + 1)),
                    ],
                    color.filled(),
                )
            })
        }))?;
        chart.draw_series(shares.iter().enumerate().flat_map(|(c, row)| {
            row.iter()
                .enumerate()
                .filter(|(_, x)| **x > 0.0)
                .map(move |(e, &x)| {
                    let style = TextStyle::from(("sans-serif", 13)).color(if x > 0.3 {
                        &BLACK
                    } else {
                        &WHITE
                    });
                    Text::new(
                        format!("{:.0}", 100.0 * x),
                        (SegmentValue::CenterOf(e), SegmentValue::CenterOf(c)),
                        style,
                    )
                })
        }))?;
    }
    Ok(())
}
