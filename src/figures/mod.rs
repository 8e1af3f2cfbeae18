//! Every figure of the book, one function each, drawn with plotters into SVG; one file per
//! chapter (1–2 position, 3 long context, 4 tokenizer, 5 MoE, 6 parameters, 7 optimisers,
//! 8 chat, 9 the forward pass, 11 quantisation, 12 training), each plotting what its chapter
//! computes from the source's sections.
//! `anatomy figures` (and `anatomy tour`) write them into `figures/`; notebooks show
//! them inline with [`show`]. Text needs a registered font, so the DejaVu Sans face is
//! compiled in: no system font is needed.
//!
//! This file holds the registry, rendering and the helpers every chart shares (text sized
//! for the book's 750-pixel column, one tick formatter, legends outside the data); each
//! chapter's figures live in the submodule named after the chapter's module.

mod chat;
mod long_context;
mod moe;
mod optim;
mod params;
mod performance;
mod position;
mod quant;
mod qwen3;
mod real;
mod real_extrapolation;
mod tokenizer;
mod train;
mod train_context;
mod train_dynamics;

use crate::error::{Error, Result};
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};
use std::cell::Cell;
use std::path::{Path, PathBuf};

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;
type Drawn<T> = std::result::Result<T, Box<dyn std::error::Error>>;
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
        size: (800, 680),
        draw: position::rope_clocks,
    },
    Figure {
        name: "rope_heatmap",
        size: (800, 560),
        draw: position::rope_heatmap,
    },
    Figure {
        name: "rope_decay",
        size: (800, 440),
        draw: position::rope_decay,
    },
    Figure {
        name: "scaling_wavelengths",
        size: (800, 460),
        draw: long_context::scaling_wavelengths,
    },
    Figure {
        name: "yarn_ramp",
        size: (800, 420),
        draw: long_context::yarn_ramp,
    },
    Figure {
        name: "tok_embedding_norms",
        size: (820, 440),
        draw: tokenizer::tok_embedding_norms,
    },
    Figure {
        name: "tok_vocab_lengths",
        size: (820, 440),
        draw: tokenizer::tok_vocab_lengths,
    },
    Figure {
        name: "moe_balance",
        size: (1000, 480),
        draw: moe::moe_balance,
    },
    Figure {
        name: "param_shares",
        size: (860, 400),
        draw: params::param_shares,
    },
    Figure {
        name: "newton_schulz_map",
        size: (800, 440),
        draw: optim::newton_schulz_map,
    },
    Figure {
        name: "muon_demo",
        size: (1000, 460),
        draw: optim::muon_demo,
    },
    Figure {
        name: "muon_sweep",
        size: (800, 440),
        draw: optim::muon_sweep,
    },
    Figure {
        name: "chat_budget",
        size: (1000, 620),
        draw: chat::chat_budget,
    },
    Figure {
        name: "qwen3_word_experts",
        size: (1000, 460),
        draw: qwen3::qwen3_word_experts,
    },
    Figure {
        name: "trained_word_experts",
        size: (1000, 720),
        draw: qwen3::trained_word_experts,
    },
    Figure {
        name: "roofline",
        size: (900, 560),
        draw: performance::roofline,
    },
    Figure {
        name: "quant_error",
        size: (820, 460),
        draw: quant::quant_error,
    },
    Figure {
        name: "train_curves",
        size: (1000, 480),
        draw: train::train_curves,
    },
    Figure {
        name: "tok_bos_sink",
        size: (900, 420),
        draw: tokenizer::tok_bos_sink,
    },
    Figure {
        name: "real_sink",
        size: (900, 420),
        draw: real::real_sink,
    },
    Figure {
        name: "real_decay",
        size: (1000, 440),
        draw: real::real_decay,
    },
    Figure {
        name: "train_collapse",
        size: (1000, 440),
        draw: train_dynamics::train_collapse,
    },
    Figure {
        name: "train_muon",
        size: (1000, 480),
        draw: train_dynamics::train_muon,
    },
    Figure {
        name: "train_max_logit",
        size: (900, 440),
        draw: train_dynamics::train_max_logit,
    },
    Figure {
        name: "train_glitch",
        size: (1000, 480),
        draw: train_dynamics::train_glitch,
    },
    Figure {
        name: "real_extrapolation",
        size: (900, 480),
        draw: real_extrapolation::real_extrapolation,
    },
    Figure {
        name: "train_direct_extrapolation",
        size: (820, 440),
        draw: train_context::train_direct_extrapolation,
    },
    Figure {
        name: "train_pi_short",
        size: (820, 360),
        draw: train_context::train_pi_short,
    },
    Figure {
        name: "train_ntk_yarn",
        size: (900, 480),
        draw: train_context::train_ntk_yarn,
    },
    Figure {
        name: "train_finetune_router",
        size: (1000, 480),
        draw: train_context::train_finetune_router,
    },
    Figure {
        name: "train_rope_theta_finetune",
        size: (900, 460),
        draw: train_context::train_rope_theta_finetune,
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
    WIDTH.set(fig.size.0);
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
    // A file or device where the directory should be is the caller's input (exit 2).
    crate::output::create_dir(dir)?;
    FIGURES
        .iter()
        .map(|f| {
            let path = dir.join(format!("{}.svg", f.name));
            let svg = render_svg(f.name)?;
            // Replaced atomically; a FIFO or link planted in DIR is not followed.
            crate::output::write_output(&path, |w| w.write_all(svg.as_bytes()))?;
            Ok(path)
        })
        .collect()
}

/// The book's text column in CSS pixels: a wider figure is scaled down to fit it.
const COLUMN: u32 = 750;

thread_local! {
    /// The width of the figure being drawn on this thread (set by [`render_svg`]).
    static WIDTH: Cell<u32> = const { Cell::new(COLUMN) };
}

/// Text sizes as they read in the book, in CSS pixels (see [`font`]).
const TITLE: f64 = 15.0;
const PANEL: f64 = 13.5;
const LABEL: f64 = 12.0;
const TICK: f64 = 11.0;

/// How many SVG pixels make one CSS pixel of the book page: the book scales a figure wider
/// than its column down by column ÷ width.
fn scale() -> f64 {
    f64::from(WIDTH.get().max(COLUMN)) / f64::from(COLUMN)
}

/// plotters' SVG backend writes a font of size s as `font-size = s / 1.24`.
const SVG_FONT_SHRINK: f64 = 1.24;

/// The sans-serif face at the size that reads as `px` pixels in the book's column.
fn font(px: f64) -> FontDesc<'static> {
    FontDesc::new(
        FontFamily::SansSerif,
        px * scale() * SVG_FONT_SHRINK,
        FontStyle::Normal,
    )
}

/// The width and height of `text` as the SVG shows it: plotters measures at the size it was
/// given, the SVG is written [`SVG_FONT_SHRINK`] times smaller.
fn text_size(area: &Area, text: &str, style: &TextStyle) -> Drawn<(i32, i32)> {
    let (w, h) = area.estimate_text_size(text, style)?;
    let shown = |v: u32| (f64::from(v) / SVG_FONT_SHRINK).ceil() as i32;
    Ok((shown(w), shown(h)))
}

/// `px` book pixels in SVG pixels (for gaps and key samples that go with [`font`]).
fn px(px: f64) -> i32 {
    (px * scale()).round() as i32
}

/// A tick label: the shortest decimal that shows the tick (0, 2.5, 0.001, not 0.0, 2.50,
/// 1e-3), never "-0", and thousands grouped from 10 000 on.
fn tick(x: &f64) -> String {
    let x = *x;
    if !x.is_finite() {
        return String::new();
    }
    // Six decimals absorb float noise (0.30000000000000004); shorter ticks lose only zeros.
    let mut s = format!("{:.6}", x.abs());
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if s == "0" {
        // A log axis's tick below 5·10⁻⁷ keeps its value; float noise around 0 is 0.
        return if x.abs() < 1e-12 { s } else { format!("{x:e}") };
    }
    let (int, frac) = s.split_once('.').map_or((s.as_str(), ""), |(i, f)| (i, f));
    let int = if int.len() > 4 {
        let digits: Vec<char> = int.chars().collect();
        let mut grouped = String::new();
        for (k, c) in digits.iter().enumerate() {
            if k > 0 && (digits.len() - k).is_multiple_of(3) {
                grouped.push(' ');
            }
            grouped.push(*c);
        }
        grouped
    } else {
        int.to_string()
    };
    let sign = if x < 0.0 { "−" } else { "" };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

/// The mesh every value-by-value chart uses: book-sized tick labels and axis descriptions,
/// and [`tick`] on both axes.
fn mesh<'a, 'b, X, Y>(
    chart: &'b mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> MeshStyle<'a, 'b, X, Y, SVGBackend<'a>>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut m = mesh_fonts(chart);
    m.x_label_formatter(&tick).y_label_formatter(&tick);
    m
}

/// Book-sized tick labels and axis descriptions, for charts whose axes are not plain
/// numbers (categories, segments).
fn mesh_fonts<'a, 'b, X, Y, XT, YT>(
    chart: &'b mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> MeshStyle<'a, 'b, X, Y, SVGBackend<'a>>
where
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
{
    let mut m = chart.configure_mesh();
    m.label_style(font(TICK))
        .axis_desc_style(font(LABEL))
        .light_line_style(BLACK.mix(0.04))
        .bold_line_style(BLACK.mix(0.12));
    m
}

/// A chart builder with the book's title font and room for the tick labels.
fn plot<'a, 'b>(
    area: &'a Area<'b>,
    caption: &str,
    caption_px: f64,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(area);
    // The right margin holds half of the last tick label.
    b.margin(px(10.0))
        .margin_right(px(28.0))
        .x_label_area_size(px(36.0))
        .y_label_area_size(px(48.0));
    if !caption.is_empty() {
        b.caption(caption, font(caption_px));
    }
    b
}

/// A legend key for a line series: a 20-pixel stroke in the series' own style.
fn line_key<S: Into<ShapeStyle> + Clone>(
    style: S,
) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    let len = px(20.0);
    move |(x, y)| PathElement::new(vec![(x, y), (x + len, y)], style.clone())
}

/// The legend box every chart uses: translucent white, black border, book-sized text.
fn draw_legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .label_font(font(LABEL))
        .legend_area_size(px(26.0))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The sample drawn before a legend entry of [`legend_on_top`].
#[derive(Clone, Copy)]
enum Key {
    Line(RGBColor, u32),
    Dashed(RGBColor, u32),
    Fill(RGBColor),
    Dot(RGBColor),
}

/// Draws a legend in rows across the top of `area`, centred, outside any chart, and
/// returns the area below it: a key that hides no data.
fn legend_on_top<'a>(area: &Area<'a>, keys: &[(Key, String)]) -> Drawn<Area<'a>> {
    let style = TextStyle::from(font(LABEL)).pos(Pos::new(HPos::Left, VPos::Center));
    let (width, _) = area.dim_in_pixel();
    let (sample, gap, spacing, row) = (px(24.0), px(6.0), px(20.0), px(20.0));
    let mut widths = Vec::with_capacity(keys.len());
    for (_, text) in keys {
        widths.push(sample + gap + text_size(area, text, &style)?.0);
    }
    // Greedy rows no wider than the area.
    let mut rows: Vec<Vec<usize>> = vec![Vec::new()];
    let mut used = 0;
    for (k, &w) in widths.iter().enumerate() {
        let extra = if used == 0 { w } else { spacing + w };
        if used > 0 && used + extra > width as i32 - 2 * gap {
            rows.push(Vec::new());
            used = 0;
        }
        used += if used == 0 { w } else { spacing + w };
        rows.last_mut().expect("one row").push(k);
    }
    for (r, members) in rows.iter().enumerate() {
        let total: i32 =
            members.iter().map(|&k| widths[k]).sum::<i32>() + spacing * (members.len() as i32 - 1);
        let mut x = (width as i32 - total) / 2;
        let y = row * r as i32 + row / 2 + px(4.0);
        for &k in members {
            let (key, text) = &keys[k];
            let h = px(5.0);
            match *key {
                Key::Line(c, w) => area.draw(&PathElement::new(
                    vec![(x, y), (x + sample, y)],
                    c.stroke_width(w),
                ))?,
                Key::Dashed(c, w) => {
                    for d in 0..3 {
                        let x0 = x + d * sample * 2 / 5;
                        area.draw(&PathElement::new(
                            vec![(x0, y), (x0 + sample / 4, y)],
                            c.stroke_width(w),
                        ))?;
                    }
                }
                Key::Fill(c) => area.draw(&Rectangle::new(
                    [(x + 4, y - h), (x + sample - 4, y + h)],
                    c.filled(),
                ))?,
                Key::Dot(c) => area.draw(&Circle::new((x + sample / 2, y), h, c.filled()))?,
            }
            area.draw(&Text::new(
                text.clone(),
                (x + sample + gap, y),
                style.clone(),
            ))?;
            x += widths[k] + spacing;
        }
    }
    let height = row * rows.len() as i32 + px(8.0);
    Ok(area.split_vertically(height).1)
}

/// Displays a figure inline in an evcxr (Jupyter) notebook.
pub fn show(name: &str) -> Result<()> {
    let svg = render_svg(name)?;
    println!("EVCXR_BEGIN_CONTENT image/svg+xml\n{svg}\nEVCXR_END_CONTENT");
    Ok(())
}

/// The running example of chapters 1–3: head dimension 128, RoPE base 10 000.
const D: usize = 128;
const BASE: f64 = 10_000.0;
