//! Every figure of the book, one function each, drawn with plotters into SVG; one file per
//! chapter (1–2 position, 3 long context, 4 tokenizer, 5 MoE, 6 parameters, 7 optimisers,
//! 9 the forward pass, 11 quantisation, 12 training), each plotting what its chapter computes from the
//! source's sections.
//! `anatomy figures` (and `anatomy tour`) write them into `figures/`; notebooks show
//! them inline with [`show`]. Text needs a registered font, so the DejaVu Sans face is
//! compiled in: no system font is needed.
//!
//! This file holds the registry, rendering and the helpers every chart shares; each
//! chapter's figures live in the submodule named after the chapter's module.

mod long_context;
mod moe;
mod optim;
mod params;
mod position;
mod quant;
mod qwen3;
mod tokenizer;
mod train;
mod train_context;
mod train_dynamics;

use crate::error::{Error, Result};
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
        draw: position::rope_clocks,
    },
    Figure {
        name: "rope_heatmap",
        size: (800, 460),
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
        size: (1200, 420),
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
        size: (1000, 440),
        draw: optim::muon_demo,
    },
    Figure {
        name: "muon_sweep",
        size: (800, 440),
        draw: optim::muon_sweep,
    },
    Figure {
        name: "qwen3_word_experts",
        size: (1000, 420),
        draw: qwen3::qwen3_word_experts,
    },
    Figure {
        name: "trained_word_experts",
        size: (1400, 360),
        draw: qwen3::trained_word_experts,
    },
    Figure {
        name: "quant_error",
        size: (820, 460),
        draw: quant::quant_error,
    },
    Figure {
        name: "train_curves",
        size: (1200, 440),
        draw: train::train_curves,
    },
    Figure {
        name: "tok_bos_sink",
        size: (900, 420),
        draw: tokenizer::tok_bos_sink,
    },
    Figure {
        name: "train_collapse",
        size: (1260, 420),
        draw: train_dynamics::train_collapse,
    },
    Figure {
        name: "train_muon",
        size: (1200, 440),
        draw: train_dynamics::train_muon,
    },
    Figure {
        name: "train_max_logit",
        size: (900, 440),
        draw: train_dynamics::train_max_logit,
    },
    Figure {
        name: "train_glitch",
        size: (1200, 440),
        draw: train_dynamics::train_glitch,
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
        size: (1200, 440),
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
    std::fs::create_dir_all(dir).map_err(|source| Error::Write {
        path: dir.to_path_buf(),
        source,
    })?;
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

/// A legend key for a line series: a 20-pixel stroke in the series' own style.
fn line_key<S: Into<ShapeStyle> + Clone>(
    style: S,
) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style.clone())
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

/// The running example of chapters 1–3: head dimension 128, RoPE base 10 000.
const D: usize = 128;
const BASE: f64 = 10_000.0;
