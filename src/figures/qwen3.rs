//! Chapter 9's figures: which experts each word class is routed to, in the bundled tiny
//! Qwen3-MoE (toy grammar) and in the model this crate trained on the real corpus
//! (`s1.exercise3`).

use super::{Area, DrawResult, PANEL, TICK, TITLE, font, mesh_fonts, plot, px};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Chapter 9: which experts each word class goes to in the bundled tiny Qwen3-MoE (trained
/// on a toy grammar), one heatmap per MoE layer; cells give the share of the class's
/// expert slots in percent.
pub(super) fn qwen3_word_experts(root: &Area) -> DrawResult {
    let (config, ckpt) = crate::qwen3::open(&crate::qwen3::bundled_dir())?;
    let model = crate::qwen3::Model::new(config, &ckpt)?;
    let tok = crate::tokenizer::Tokenizer::qwen()?;
    let r = crate::qwen3::word_class_routing(&model, &tok)?;
    draw_word_experts(
        root,
        "Bundled tiny Qwen3-MoE: share of each word class's expert slots (%), held-out toy-grammar text",
        &r,
        (1, 2),
    )
}

/// Chapter 9 and `s1.exercise3`: the same heatmaps for the model `anatomy train` trained on
/// the real corpus (data/anatomy-moe/), on the held-out document and word classes of its
/// `word_classes.json`.
pub(super) fn trained_word_experts(root: &Area) -> DrawResult {
    let dir = crate::qwen3::trained::trained_dir();
    let (config, ckpt) = crate::qwen3::open(&dir)?;
    let model = crate::qwen3::Model::new(config, &ckpt)?;
    let tok = crate::tokenizer::Tokenizer::qwen()?;
    let r = crate::qwen3::word_class_routing_file(
        &model,
        &tok,
        &dir.join("word_classes.json"),
        "a held-out document of the corpus",
    )?;
    draw_word_experts(
        root,
        "Model trained here (data/anatomy-moe): share of each word class's expert slots (%), a held-out document",
        &r,
        (2, 2),
    )
}

/// One heatmap per MoE layer of a word-class routing table, under a title, in a grid of
/// `(rows, columns)` panels.
fn draw_word_experts(
    root: &Area,
    heading: &str,
    r: &crate::qwen3::ClassRouting,
    grid: (usize, usize),
) -> DrawResult {
    root.fill(&WHITE)?;
    let body = root.titled(heading, font(TITLE))?;
    let panels = body.split_evenly(grid);
    let classes = r.classes.clone();
    for (panel, (layer, shares)) in panels.iter().zip(&r.layers) {
        let experts = shares.first().map_or(0, Vec::len);
        let names = classes.clone();
        let mut chart = plot(panel, &format!("layer {layer} (colour: 0 → 50%)"), PANEL)
            .y_label_area_size(px(84.0))
            // A segmented range a..b has b − a + 1 cells.
            .build_cartesian_2d(
                (0..experts - 1).into_segmented(),
                (0..classes.len() - 1).into_segmented(),
            )?;
        mesh_fonts(&mut chart)
            .disable_mesh()
            .x_desc("expert")
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
                    let style = TextStyle::from(font(TICK))
                        .color(if x > 0.3 { &BLACK } else { &WHITE })
                        .pos(Pos::new(HPos::Center, VPos::Center));
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
