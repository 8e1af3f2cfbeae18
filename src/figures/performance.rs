//! Chapter 10's figure: the roofline of the 4-layer Qwen3-30B-A3B-shaped bench model in
//! bf16, Q8_0 and Q4_K_M, drawn from the `anatomy bench --json` reports committed under
//! [`RUNS_DIR`]. Each point's arithmetic intensity (FLOPs per byte of weights read) comes
//! from the model's shape and the report's work counts; its rate from the measured tokens
//! per second; the ceilings from the probes the same reports carry.

use super::{Area, DrawResult, Drawn};
use crate::quant::mix::{FileType, MixContext, TensorRole, choose_type, tensor_bytes};
use crate::qwen3::config::Qwen3Config;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Deserialize;
use std::path::Path;

/// The committed reports, one directory per round of runs, relative to the crate root.
pub const RUNS_DIR: &str = "data/bench/roofline";
/// The bench model: the published Qwen3-30B-A3B config cut to this many layers.
const CONFIG: &str = "data/configs/qwen3-30b-a3b.json";
const BENCH_LAYERS: usize = 4;
/// The bench files, by the llama.cpp file-type name each report's file stem carries.
const FILES: [(&str, &str, RGBColor); 3] = [
    ("bf16", "bf16", RGBColor(0, 114, 178)),
    ("q8_0", "Q8_0", RGBColor(0, 158, 115)),
    ("q4_k_m", "Q4_K_M", RGBColor(213, 94, 0)),
];
const PROMPTS: [usize; 2] = [128, 512];

/// The fields of a bench report the figure reads (`BenchReport` as JSON).
#[derive(Deserialize)]
struct Report {
    weights_bytes: f64,
    prompt_len: usize,
    #[serde(rename = "gen")]
    gen_tokens: usize,
    prefill_tok_s: f64,
    decode_tok_s: f64,
    work: Work,
    machine: Machine,
}

#[derive(Deserialize)]
struct Work {
    decode_bytes_per_token: f64,
    active_params_per_token: f64,
    lm_head_params: f64,
    prefill_flops_per_token: f64,
}

#[derive(Deserialize)]
struct Machine {
    mem_read_gb_s: f64,
    fma_gflop_s: f64,
    bf16_gflop_s: Option<f64>,
    int8_gop_s: Option<f64>,
}

// ANCHOR: intensity
/// A measured rate on the roofline: FLOPs per byte of weights read, GFLOP/s.
#[derive(Clone, Copy, Debug)]
struct Point {
    intensity: f64,
    gflop_s: f64,
}

/// Attention FLOPs of one token that sees `keys` positions: a score and a
/// weighted value, one multiply-add per head dimension each, per query head.
fn attention_flops(c: &Qwen3Config, keys: f64) -> f64 {
    let heads = (c.num_hidden_layers * c.num_attention_heads) as f64;
    2.0 * 2.0 * heads * c.head_dim as f64 * keys
}

/// Decode: 2 FLOPs per active and LM-head weight plus attention, against
/// the weight bytes one step reads.
fn decode_point(r: &Report, c: &Qwen3Config) -> Point {
    let keys = r.prompt_len as f64 + (r.gen_tokens as f64 + 1.0) / 2.0;
    let weights = r.work.active_params_per_token + r.work.lm_head_params;
    let flops = 2.0 * weights + attention_flops(c, keys);
    Point {
        intensity: flops / r.work.decode_bytes_per_token,
        gflop_s: r.decode_tok_s * flops / 1e9,
    }
}

/// Prefill: all the prompt's FLOPs against one pass over the file's weights,
/// of the embedding table only one row per token. (8 of 128 experts for each
/// of 128 tokens leave an expert unread with probability (15/16)^128.)
fn prefill_point(r: &Report, c: &Qwen3Config, embed_bytes: f64) -> Point {
    let n = r.prompt_len as f64;
    let bytes = r.weights_bytes - embed_bytes * (1.0 - n / c.vocab_size as f64);
    let flops = r.work.prefill_flops_per_token * n;
    Point {
        intensity: flops / bytes,
        gflop_s: r.prefill_tok_s * r.work.prefill_flops_per_token / 1e9,
    }
}
// ANCHOR_END: intensity

/// Bytes of the embedding table in a `file_type` file (llama.cpp's type rule).
fn embed_bytes(c: &Qwen3Config, file_type: &str) -> Result<f64, String> {
    let ftype =
        FileType::from_name(file_type).ok_or_else(|| format!("unknown file type {file_type}"))?;
    let ctx = MixContext {
        n_layer: c.num_hidden_layers,
        n_expert: c.num_experts,
        tied_embeddings: c.tie_word_embeddings,
        is_70b: false,
    };
    let shape = [c.vocab_size, c.hidden_size];
    let ty = choose_type(ftype, &TensorRole::TokenEmbd, &shape, &ctx);
    tensor_bytes(ty, &shape)
        .map(|b| b as f64)
        .ok_or_else(|| "embedding size overflows".into())
}

/// Every round's report for `stem` (e.g. `bf16-128`), in round order.
fn reports(root: &Path, stem: &str) -> Result<Vec<Report>, Box<dyn std::error::Error>> {
    let mut rounds: Vec<_> = std::fs::read_dir(root.join(RUNS_DIR))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    rounds.sort();
    let mut out = Vec::new();
    for dir in rounds {
        let path = dir.join(format!("{stem}.json"));
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path:?}: {e}"))?;
        out.push(serde_json::from_str(&text).map_err(|e| format!("{path:?}: {e}"))?);
    }
    if out.is_empty() {
        return Err(format!("no reports for {stem} under {RUNS_DIR}").into());
    }
    Ok(out)
}

/// The best of several readings. Other work on a shared machine only ever slows a run, so
/// the fastest reading is the best estimate of what the machine can do.
fn best(v: impl IntoIterator<Item = f64>) -> f64 {
    v.into_iter().fold(0.0, f64::max)
}

/// A tick label with no spurious decimals: 0.5, 1, 20, 1000.
fn tick(v: &f64) -> String {
    if *v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// Log–log roofline: the read-bandwidth diagonal and the f32 FMA, bf16-dot and int8-dot
/// peaks (each the best of every report's probe), and each file's prefill (128 and 512
/// tokens) and decode at its fastest round, with a bar down to its slowest.
pub(super) fn roofline(root: &Area) -> DrawResult {
    root.fill(&WHITE)?;
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut c = Qwen3Config::from_file(&crate_dir.join(CONFIG))?;
    c.num_hidden_layers = BENCH_LAYERS;
    let (points, machines) = measured(crate_dir, &c)?;
    let (bw, peaks) = ceilings(&machines);
    let (x0, x1, y0, y1) = (0.5f64, 200.0f64, 4.0f64, 3000.0f64);
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Roofline of the 4-layer bench model on 2 threads",
            ("sans-serif", 22),
        )
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .with_key_points(vec![0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]),
            (y0..y1).log_scale().with_key_points(vec![
                5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
            ]),
        )?;
    chart
        .configure_mesh()
        .x_desc("arithmetic intensity (FLOP per byte of weights read)")
        .y_desc("rate (GFLOP/s)")
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(WHITE)
        .draw()?;

    let top = best(peaks.iter().map(|p| p.1)).min(y1);
    draw_ceilings(&mut chart, bw, &peaks, (x0, x1), top)?;
    draw_points(&mut chart, &points)?;
    draw_legend(&mut chart)
}

/// A file's point in one phase (0 prefill 128, 1 prefill 512, 2 decode): its fastest
/// round and the slowest round's rate.
type Summary = (&'static str, usize, Point, f64);

/// Every file's three points and the machines of every report read.
fn measured(crate_dir: &Path, c: &Qwen3Config) -> Drawn<(Vec<Summary>, Vec<Machine>)> {
    // Decode after either prompt is one series: its intensity moves by under 3 %.
    let mut points = Vec::new();
    let mut machines = Vec::new();
    for (file, _, _) in FILES {
        let embed = embed_bytes(c, file)?;
        let mut decode = Vec::new();
        for (phase, n) in PROMPTS.iter().enumerate() {
            let runs = reports(crate_dir, &format!("{file}-{n}"))?;
            let prefill = runs.iter().map(|r| prefill_point(r, c, embed)).collect();
            points.push(summarise(file, phase, prefill));
            decode.extend(runs.iter().map(|r| decode_point(r, c)));
            machines.extend(runs.into_iter().map(|r| r.machine));
        }
        points.push(summarise(file, 2, decode));
    }
    Ok((points, machines))
}

/// The read bandwidth and the named compute peaks: the best any report measured.
fn ceilings(machines: &[Machine]) -> (f64, Vec<(String, f64)>) {
    let bw = best(machines.iter().map(|m| m.mem_read_gb_s));
    let fma = best(machines.iter().map(|m| m.fma_gflop_s));
    let bf16 = best(machines.iter().filter_map(|m| m.bf16_gflop_s));
    let int8 = best(machines.iter().filter_map(|m| m.int8_gop_s));
    let peaks: Vec<(String, f64)> = [
        ("f32 FMA", fma),
        ("bf16 dot", bf16),
        ("int8 dot (VNNI)", int8),
    ]
    .into_iter()
    .filter(|p| p.1 > 0.0)
    .map(|(name, v)| (format!("{name} {v:.0}"), v))
    .collect();
    (bw, peaks)
}

/// The read ceiling up to `top`, and each compute peak flat from where it meets it.
fn draw_ceilings<X, Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    bw: f64,
    peaks: &[(String, f64)],
    (x0, x1): (f64, f64),
    top: f64,
) -> DrawResult
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    // The read ceiling: rate = intensity × bandwidth, up to the highest peak.
    let grey = RGBColor(90, 90, 90);
    chart.draw_series(LineSeries::new(
        [(x0, x0 * bw), (top / bw, top)],
        grey.stroke_width(2),
    ))?;
    let label_x = 0.55;
    chart.draw_series(std::iter::once(Text::new(
        format!("read ceiling {bw:.0} GB/s"),
        (label_x, label_x * bw * 3.5),
        TextStyle::from(("sans-serif", 15).into_font())
            .color(&grey)
            .pos(Pos::new(HPos::Left, VPos::Bottom)),
    )))?;
    // Each compute peak, flat from where it meets the read ceiling, named above its line.
    let above =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Right, VPos::Bottom));
    for (name, peak) in peaks {
        chart.draw_series(DashedLineSeries::new(
            [(peak / bw, *peak), (x1, *peak)],
            8,
            5,
            BLACK.stroke_width(2),
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{name} GFLOP/s"),
            (x1 / 1.05, peak * 1.04),
            above.clone(),
        )))?;
    }
    Ok(())
}

/// Each file's points, with a bar down to its slowest round.
fn draw_points<X, Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    points: &[Summary],
) -> DrawResult
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    // Points: colour = file, shape = phase; a bar down to the slowest round.
    for (file, phase, p, slowest) in points {
        let color = FILES.iter().find(|f| f.0 == *file).map_or(BLACK, |f| f.2);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(p.intensity, *slowest), (p.intensity, p.gflop_s)],
            color.stroke_width(2),
        )))?;
        let at = (p.intensity, p.gflop_s);
        match phase {
            0 => chart.draw_series(std::iter::once(Circle::new(at, 7, color.filled())))?,
            1 => chart.draw_series(std::iter::once(
                EmptyElement::at(at) + Rectangle::new([(-6, -6), (6, 6)], color.filled()),
            ))?,
            _ => chart.draw_series(std::iter::once(TriangleMarker::new(at, 9, color.filled())))?,
        };
    }
    Ok(())
}

/// One legend entry per file (colour) and per phase (shape).
fn draw_legend<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> DrawResult
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    // Legend: one entry per file (colour) and per phase (shape).
    for (_, name, color) in FILES {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled()));
    }
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
        .label("prefill, 128 tokens")
        .legend(|(x, y)| Circle::new((x + 6, y), 6, BLACK.filled()));
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
        .label("prefill, 512 tokens")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], BLACK.filled()));
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
        .label("decode")
        .legend(|(x, y)| TriangleMarker::new((x + 6, y), 8, BLACK.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// A point's fastest round, with its slowest (the bar's lower end).
fn summarise(file: &'static str, phase: usize, pts: Vec<Point>) -> Summary {
    let slowest = pts.iter().map(|p| p.gflop_s).fold(f64::INFINITY, f64::min);
    let fastest = pts
        .iter()
        .copied()
        .fold(pts[0], |a, b| if b.gflop_s > a.gflop_s { b } else { a });
    (file, phase, fastest, slowest)
}
