//! A Hugging Face checkpoint streamed into a GGUF file llama.cpp loads (chapter 11:
//! `anatomy quantize`).
//!
//! Every tensor of the checkpoint gets its GGUF name from [`super::gguf_names`] (the experts
//! of a layer stacked into one `[E, rows, cols]` tensor, expert by expert, which is exactly
//! their data in expert order), its type from [`crate::quant::mix::choose_type`] (llama.cpp's
//! mix for the file type), and the file's metadata comes from [`super::gguf_config`] plus
//! `general.file_type` (llama.cpp's ftype id), `general.quantization_version` = 2 and
//! `general.alignment` = 32.
//!
//! The header is written first, then the tensors one by one, each read row block by row
//! block from the memory-mapped checkpoint, widened to f32 and quantised: at most one
//! output tensor's bytes and one row block of f32 are held at a time. The file goes through
//! [`crate::output::write_output`], so a regular file is replaced atomically: a failure
//! half-way leaves no half-written GGUF behind.

use crate::checkpoint::Checkpoint;
use crate::error::{CheckpointProblem, Error, Result};
use crate::gguf::{GgufWriter, MetaValue};
use crate::kernels::Matrix;
use crate::quant::mix::{FileType, MixContext, TensorRole, choose_type};
use crate::quant::{self, GgmlType};
use crate::qwen3::weights::Weights;
use crate::qwen3::{Qwen3Config, gguf_config, gguf_names};
use crate::tokenizer::Tokenizer;
use crate::tokenizer::gguf_vocab::gguf_tokenizer_metadata_for;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// The alignment of the data section (ggml's default).
pub const ALIGNMENT: u64 = 32;
/// `general.quantization_version`: the block layouts of ggml since 2023.
pub const QUANTIZATION_VERSION: u32 = 2;
/// f32 weights widened per row block (4 MiB of f32).
const BLOCK_ELEMENTS: usize = 1 << 20;

/// Where one piece of a GGUF tensor comes from: rows `row0 .. row0 + rows` of checkpoint
/// tensor `hf` viewed as a matrix (all axes but the last are rows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub hf: String,
    pub row0: usize,
    pub rows: usize,
}

/// One tensor of the output file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTensor {
    /// The GGUF name (`blk.0.ffn_down_exps.weight`).
    pub name: String,
    /// Row-major shape, outermost first (`[E, H, I]` for stacked experts).
    pub shape: Vec<usize>,
    pub ty: GgmlType,
    /// Its data: these pieces, concatenated.
    pub parts: Vec<Part>,
}

impl PlannedTensor {
    /// ggml dims (innermost first), as the GGUF tensor info stores them.
    pub fn dims(&self) -> Vec<u64> {
        self.shape.iter().rev().map(|&d| d as u64).collect()
    }

    /// Number of weights.
    pub fn elements(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }

    /// Bytes in the file (the planner checked it is computable).
    pub fn bytes(&self) -> u64 {
        quant::mix::tensor_bytes(self.ty, &self.shape).unwrap_or(0)
    }
}

/// What was written.
#[derive(Clone, Debug)]
pub struct Summary {
    pub ftype: FileType,
    /// Where the vocabulary written came from.
    pub vocab: VocabSource,
    pub tensors: Vec<PlannedTensor>,
    /// Bytes of the checkpoint's tensor data.
    pub input_bytes: u64,
    /// Bytes of the output's tensor data (without header and padding).
    pub output_bytes: u64,
}

/// The model facts llama.cpp's mix looks at, from the config.
pub fn mix_context(cfg: &Qwen3Config) -> MixContext {
    MixContext {
        n_layer: cfg.num_hidden_layers,
        n_expert: cfg.num_experts,
        tied_embeddings: cfg.tie_word_embeddings,
        // llama.cpp's Qwen2 loader classes 80 layers as "70B" (Qwen2-72B).
        is_70b: cfg.model_type == "qwen2" && cfg.num_hidden_layers == 80,
    }
}

fn tensor_error(ckpt: &Checkpoint, hf: &str, problem: CheckpointProblem) -> Error {
    let file = ckpt.file_of(hf).unwrap_or(ckpt.dir()).to_path_buf();
    Error::Checkpoint {
        file,
        tensor: Some(hf.to_string()),
        problem,
    }
}

/// The checkpoint's name with the `model.` prefix a bare `Qwen3MoeModel` save lacks.
fn canonical(name: &str, bare: bool) -> String {
    if bare && name != "lm_head.weight" {
        format!("model.{name}")
    } else {
        name.to_string()
    }
}

/// The checkpoint pieces gathered per GGUF tensor: its shape and its parts by expert
/// index (0 for a tensor that is not an expert's).
#[derive(Default)]
struct Slots {
    by_name: BTreeMap<String, (Vec<usize>, BTreeMap<usize, Part>)>,
}

impl Slots {
    /// Puts `part` into GGUF tensor `gguf` of `shape` at `expert`'s slot; a shape that
    /// disagrees with the tensor's or a slot filled twice is an error naming the tensor.
    fn add(
        &mut self,
        ckpt: &Checkpoint,
        gguf: String,
        expert: Option<usize>,
        part: Part,
        shape: Vec<usize>,
    ) -> Result<()> {
        let entry = self
            .by_name
            .entry(gguf)
            .or_insert_with(|| (shape.clone(), BTreeMap::new()));
        if entry.0 != shape {
            let problem = CheckpointProblem::Shape {
                found: shape,
                expected: entry.0.clone(),
            };
            return Err(tensor_error(ckpt, &part.hf, problem));
        }
        let slot = expert.unwrap_or(0);
        if let Some(prev) = entry.1.get(&slot) {
            // Two checkpoint tensors for one GGUF slot (say, fused and per-expert experts).
            let first = ckpt.file_of(&prev.hf).unwrap_or(ckpt.dir()).to_path_buf();
            let problem = CheckpointProblem::Duplicate { first };
            return Err(tensor_error(ckpt, &part.hf, problem));
        }
        entry.1.insert(slot, part);
        Ok(())
    }
}

fn part(hf: &str, row0: usize, rows: usize) -> Part {
    Part {
        hf: hf.to_string(),
        row0,
        rows,
    }
}

/// Rows of a tensor viewed as a matrix: all axes but the last.
fn rows_of(shape: &[usize]) -> usize {
    shape[..shape.len().saturating_sub(1)].iter().product()
}

/// Every output tensor of `ckpt` (already checked against `cfg` by [`Weights::load`]), in
/// llama.cpp's order (by layer, then by name), with the type `ftype` gives it.
pub fn plan(cfg: &Qwen3Config, ckpt: &Checkpoint, ftype: FileType) -> Result<Vec<PlannedTensor>> {
    let bare = !ckpt.contains("model.embed_tokens.weight") && ckpt.contains("embed_tokens.weight");
    let mut slots = Slots::default();
    for name in ckpt.names() {
        let full = canonical(name, bare);
        if full == "lm_head.weight" && cfg.tie_word_embeddings {
            continue; // llama.cpp reads a tied head from token_embd.weight
        }
        add_checkpoint_tensor(&mut slots, cfg, ckpt, name, &full)?;
    }
    let ctx = mix_context(cfg);
    let mut out = slots
        .by_name
        .into_iter()
        .map(|(name, (shape, parts))| typed_tensor(ckpt, name, shape, parts, ftype, &ctx))
        .collect::<Result<Vec<_>>>()?;
    out.sort_by_key(|t| (layer_of(&t.name), t.name.clone()));
    Ok(out)
}

/// Checkpoint tensor `name` (`full` with the `model.` prefix) into its GGUF slots.
fn add_checkpoint_tensor(
    slots: &mut Slots,
    cfg: &Qwen3Config,
    ckpt: &Checkpoint,
    name: &str,
    full: &str,
) -> Result<()> {
    let info = ckpt.info(name)?;
    if let Some(pre) = full.strip_suffix(".mlp.experts.gate_up_proj") {
        return add_fused_gate_up(slots, ckpt, name, pre, &info.shape);
    }
    if let Some(pre) = full.strip_suffix(".mlp.experts.down_proj") {
        let per_expert = format!("{pre}.mlp.experts.0.down_proj.weight");
        let Some(gguf) = gguf_names::to_gguf(&per_expert).map(|g| g.name) else {
            return Err(unknown_tensor(ckpt, name));
        };
        let whole = part(name, 0, rows_of(&info.shape));
        return slots.add(ckpt, gguf, None, whole, info.shape.clone());
    }
    let Some(g) = gguf_names::to_gguf(full) else {
        return Err(unknown_tensor(ckpt, name));
    };
    let whole = part(name, 0, rows_of(&info.shape));
    let Some(x) = g.expert else {
        return slots.add(ckpt, g.name, None, whole, info.shape.clone());
    };
    if x >= cfg.num_experts {
        return Err(Error::field(
            ckpt.dir().join("config.json").display().to_string(),
            "num_experts",
            format!(
                "{}, but the checkpoint has tensor `{name}`",
                cfg.num_experts
            ),
        ));
    }
    let mut shape = vec![cfg.num_experts];
    shape.extend(&info.shape);
    slots.add(ckpt, g.name, Some(x), whole, shape)
}

/// transformers' fused expert layout: `gate_up_proj` `[E, 2I, H]`, each expert's gate rows
/// then its up rows, split into the stacked `ffn_gate_exps` and `ffn_up_exps`.
fn add_fused_gate_up(
    slots: &mut Slots,
    ckpt: &Checkpoint,
    name: &str,
    pre: &str,
    shape: &[usize],
) -> Result<()> {
    let [e, two_i, h] = shape[..] else {
        let problem = CheckpointProblem::Rank {
            found: shape.to_vec(),
            expected: 3,
        };
        return Err(tensor_error(ckpt, name, problem));
    };
    let i = two_i / 2;
    for (which, offset) in [("gate_proj", 0), ("up_proj", i)] {
        let per_expert = format!("{pre}.mlp.experts.0.{which}.weight");
        let Some(gguf) = gguf_names::to_gguf(&per_expert).map(|g| g.name) else {
            return Err(unknown_tensor(ckpt, name));
        };
        for x in 0..e {
            let rows = part(name, x * two_i + offset, i);
            slots.add(ckpt, gguf.clone(), Some(x), rows, vec![e, i, h])?;
        }
    }
    Ok(())
}

/// GGUF tensor `name` once its parts are gathered: complete (every row, every expert) and
/// given the type llama.cpp's mix picks, which must be able to hold its rows.
fn typed_tensor(
    ckpt: &Checkpoint,
    name: String,
    shape: Vec<usize>,
    parts: BTreeMap<usize, Part>,
    ftype: FileType,
    ctx: &MixContext,
) -> Result<PlannedTensor> {
    let stacked = shape.len() == 3 && gguf_names::stacks_experts(&name);
    let want = if stacked { shape[0] } else { 1 };
    let parts: Vec<Part> = parts.into_values().collect();
    let rows: usize = parts.iter().map(|p| p.rows).sum();
    if rows != rows_of(&shape) || (stacked && parts.len() != want && parts.len() != 1) {
        return Err(tensor_error(
            ckpt,
            &parts[0].hf,
            CheckpointProblem::NoneOf {
                what: format!("complete set of {want} experts for `{name}`"),
                names: parts.iter().map(|p| p.hf.clone()).collect(),
            },
        ));
    }
    let role = TensorRole::from_gguf_name(&name);
    let ty = choose_type(ftype, &role, &shape, ctx);
    if quant::mix::tensor_bytes(ty, &shape).is_none() {
        return Err(tensor_error(
            ckpt,
            &parts[0].hf,
            CheckpointProblem::Malformed(format!(
                "shape {shape:?} cannot be stored as {} (rows of {} weights)",
                ty.name(),
                shape.last().copied().unwrap_or(1)
            )),
        ));
    }
    Ok(PlannedTensor {
        name,
        shape,
        ty,
        parts,
    })
}

/// llama.cpp's tensor order puts tensors outside the blocks first, then block by block.
fn layer_of(name: &str) -> i64 {
    name.strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|l| l.parse().ok())
        .unwrap_or(-1)
}

fn unknown_tensor(ckpt: &Checkpoint, name: &str) -> Error {
    tensor_error(
        ckpt,
        name,
        CheckpointProblem::Malformed(
            "not a tensor of a Qwen3 / Qwen3-MoE / Qwen2 checkpoint (no GGUF name for it)".into(),
        ),
    )
}

/// The metadata of the output file: the config's, the file type's, and the tokenizer's
/// (`tokenizer` keys; without them llama.cpp's `"none"` vocabulary of `vocab_size` ids).
pub fn metadata(
    cfg: &Qwen3Config,
    ftype: FileType,
    name: &str,
    tokenizer: Option<Vec<(String, MetaValue)>>,
) -> Vec<(String, MetaValue)> {
    let mut meta = gguf_config::gguf_metadata(cfg);
    let mut push = |k: &str, v: MetaValue| {
        meta.retain(|(key, _)| key != k);
        meta.push((k.to_string(), v));
    };
    push("general.name", MetaValue::Str(name.to_string()));
    push("general.file_type", MetaValue::U32(ftype.id()));
    push(
        "general.quantization_version",
        MetaValue::U32(QUANTIZATION_VERSION),
    );
    push("general.alignment", MetaValue::U32(ALIGNMENT as u32));
    match tokenizer {
        Some(keys) => {
            for (k, v) in keys {
                push(&k, v);
            }
        }
        None => push("tokenizer.ggml.model", MetaValue::Str("none".into())),
    }
    meta
}

/// GGUF metadata keys and their values, in file order.
pub type MetaKeys = Vec<(String, MetaValue)>;

/// Where the output's vocabulary came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VocabSource {
    /// `--vocab`, or the checkpoint's own `tokenizer.json`.
    File(std::path::PathBuf),
    /// No tokenizer given or found: Qwen's (`data/qwen.tiktoken`), the one `anatomy generate`
    /// uses for such a checkpoint.
    QwenDefault,
    /// No vocabulary written (llama.cpp's `"none"`: ids only), and why.
    None(String),
}

/// The tokenizer keys of the output: from `vocab` (a tiktoken file or tokenizer.json) if
/// given, else from `model_dir/tokenizer.json` if there is one, else Qwen's vocabulary when
/// the model has room for its ids; padded to the model's vocabulary, with the chat
/// template of `model_dir/tokenizer_config.json` if it has one. `None` keys when there is
/// no tokenizer to write.
pub fn tokenizer_metadata(
    cfg: &Qwen3Config,
    model_dir: &Path,
    vocab: Option<&Path>,
) -> Result<(Option<MetaKeys>, VocabSource)> {
    let own = model_dir.join("tokenizer.json");
    let (tok, source) = match vocab {
        Some(file) => (Tokenizer::from_file(file)?, VocabSource::File(file.into())),
        None if std::fs::symlink_metadata(&own).is_ok() => {
            (Tokenizer::from_file(&own)?, VocabSource::File(own))
        }
        None => {
            let qwen = Tokenizer::qwen()?;
            if qwen.n_ids() > cfg.vocab_size {
                let why = format!(
                    "{} has no tokenizer.json and Qwen's vocabulary ({} ids) does not fit its \
                     vocab_size {}",
                    model_dir.display(),
                    qwen.n_ids(),
                    cfg.vocab_size
                );
                return Ok((None, VocabSource::None(why)));
            }
            (qwen, VocabSource::QwenDefault)
        }
    };
    let config = model_dir.join("tokenizer_config.json");
    let template = if std::fs::symlink_metadata(&config).is_ok() {
        let doc = crate::error::read_json(&config)?;
        doc.get("chat_template")
            .and_then(|t| t.as_str())
            .map(str::to_string)
    } else {
        None
    };
    let keys = gguf_tokenizer_metadata_for(&tok, cfg.vocab_size, template.as_deref())?;
    Ok((Some(keys), source))
}

/// What to tell the user about the vocabulary written, when it was not the one they gave:
/// Qwen's by default, or none (then prompts as text need a re-run with `--vocab`).
pub fn vocab_note(s: &Summary) -> Option<String> {
    match &s.vocab {
        VocabSource::File(_) => None,
        VocabSource::QwenDefault => Some(
            "no tokenizer.json in the checkpoint: wrote Qwen's vocabulary \
             (data/qwen.tiktoken), the one `anatomy generate` uses for it; re-run with \
             --vocab FILE for another"
                .into(),
        ),
        VocabSource::None(why) => Some(format!(
            "{why}: the file has no vocabulary (token ids only); re-run with --vocab FILE \
             to give it one"
        )),
    }
}

/// The tensors a K-quant file type could not store as K blocks: rows that are not a whole
/// number of 256-weight super-blocks fall back (as llama.cpp's `tensor_type_fallback`
/// does) to a 32-weight type, or to F16. One line per fallback type with its tensor count
/// and row widths; `None` when nothing fell back.
pub fn fallback_note(s: &Summary) -> Option<String> {
    let k_block = GgmlType::Q4_K.block_size();
    if s.ftype.default_type().block_size() != k_block {
        return None;
    }
    let mut by_type: BTreeMap<&str, (usize, std::collections::BTreeSet<usize>)> = BTreeMap::new();
    for t in &s.tensors {
        let cols = t.shape.last().copied().unwrap_or(1);
        let quantised = t.ty != GgmlType::F32;
        if quantised && !cols.is_multiple_of(k_block) {
            let e = by_type.entry(t.ty.name()).or_default();
            e.0 += 1;
            e.1.insert(cols);
        }
    }
    if by_type.is_empty() {
        return None;
    }
    let mut text = format!(
        "{}: rows not a multiple of {k_block} weights cannot hold K-quant blocks; these \
         tensors fell back:\n",
        s.ftype.name()
    );
    for (ty, (n, widths)) in by_type {
        let widths: Vec<String> = widths.iter().map(usize::to_string).collect();
        text += &format!(
            "  {ty:<5} {n:>5} tensors (rows of {} weights)\n",
            widths.join(", ")
        );
    }
    Some(text)
}

/// Quantises checkpoint directory `model_dir` into GGUF file `out` as `ftype`, calling
/// `progress(done, total, tensor)` (in weights) as it goes. The tokenizer comes from
/// `vocab`, the directory or the default ([`tokenizer_metadata`]).
pub fn quantize_checkpoint(
    model_dir: &Path,
    out: &Path,
    ftype: FileType,
    vocab: Option<&Path>,
    progress: &mut dyn FnMut(u64, u64, &str),
) -> Result<Summary> {
    let cfg = Qwen3Config::from_file(&model_dir.join("config.json"))?;
    let (tokenizer, vocab) = tokenizer_metadata(&cfg, model_dir, vocab)?;
    let ckpt = Checkpoint::open(model_dir)?;
    // Every name, shape and dtype the config calls for, checked with errors naming them.
    Weights::load(&cfg, &ckpt)?;
    let tensors = plan(&cfg, &ckpt, ftype)?;
    let name = model_dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into());
    let meta = metadata(&cfg, ftype, &name, tokenizer);
    let infos: Vec<(String, Vec<u64>, GgmlType)> = tensors
        .iter()
        .map(|t| (t.name.clone(), t.dims(), t.ty))
        .collect();
    let total: u64 = tensors.iter().map(PlannedTensor::elements).sum();
    // write_output's closure speaks io::Error; the crate error it stands for is kept here.
    let mut failure: Option<Error> = None;
    let written = crate::output::write_output(out, |w| {
        let result = (|| -> Result<()> {
            let mut writer = GgufWriter::new(w, meta, infos, ALIGNMENT)?;
            let mut done = 0u64;
            for t in &tensors {
                progress(done, total, &t.name);
                writer.write_tensor_in_pieces(&t.name, |sink| write_rows(&ckpt, t, sink))?;
                done += t.elements();
            }
            progress(done, total, "");
            writer.finish()?;
            Ok(())
        })();
        result.map_err(|e| {
            // The writer knows no path: a failed write is named by the output's.
            let e = match e {
                Error::Write { source, .. } => Error::Write {
                    path: out.to_path_buf(),
                    source,
                },
                other => other,
            };
            let message = e.to_string();
            failure = Some(e);
            std::io::Error::other(message)
        })
    });
    if let Some(e) = failure {
        return Err(e);
    }
    written?;
    Ok(Summary {
        ftype,
        vocab,
        input_bytes: ckpt.data_bytes() as u64,
        output_bytes: tensors.iter().map(PlannedTensor::bytes).sum(),
        tensors,
    })
}

/// The bytes of one output tensor, handed to `sink` a block of rows at a time (about
/// `BLOCK_ELEMENTS` weights, quantised in parallel): its parts, widened and quantised. So
/// the converter holds a few megabytes, never a whole tensor.
pub fn write_rows(
    ckpt: &Checkpoint,
    t: &PlannedTensor,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let cols = t.shape.last().copied().unwrap_or(1);
    let row_bytes = t.ty.row_bytes(cols as u64).unwrap_or(0) as usize;
    for part in &t.parts {
        let info = ckpt.info(&part.hf)?;
        let m = ckpt.tensor(&part.hf, &info.shape)?;
        if m.cols != cols || part.row0 + part.rows > m.rows {
            let problem = CheckpointProblem::Shape {
                found: info.shape.clone(),
                expected: t.shape.clone(),
            };
            return Err(tensor_error(ckpt, &part.hf, problem));
        }
        let block_rows = (BLOCK_ELEMENTS / cols.max(1)).max(1);
        let mut r = part.row0;
        while r < part.row0 + part.rows {
            let n = block_rows.min(part.row0 + part.rows - r);
            let rows: Vec<Vec<u8>> = (r..r + n)
                .into_par_iter()
                .map(|row| quantize_row(ckpt, &part.hf, &m, row, t.ty, row_bytes))
                .collect::<Result<_>>()?;
            for bytes in rows {
                sink(&bytes)?;
            }
            r += n;
        }
    }
    Ok(())
}

fn quantize_row(
    ckpt: &Checkpoint,
    hf: &str,
    m: &Matrix<'_>,
    row: usize,
    ty: GgmlType,
    row_bytes: usize,
) -> Result<Vec<u8>> {
    let mut x = vec![0.0f32; m.cols];
    m.row_into(row, &mut x);
    let what = || {
        let file = ckpt.file_of(hf).unwrap_or(ckpt.dir()).display();
        format!("{file}: tensor `{hf}`")
    };
    if let Some(c) = crate::kernels::first_non_finite(&x) {
        return Err(Error::NonFinite {
            what: what(),
            detail: format!("row {row}, column {c} is {}; it cannot be quantised", x[c]),
        });
    }
    let mut bytes = Vec::with_capacity(row_bytes);
    quant::range::quantize_checked(ty, &x, &mut bytes).map_err(|e| Error::NonFinite {
        what: what(),
        detail: format!("row {row}: {e}"),
    })?;
    Ok(bytes)
}

/// What `anatomy quantize` prints: the type mix (tensors and bytes per type) and the sizes.
pub fn text_summary(s: &Summary, out: &Path) -> String {
    let mut by_type: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for t in &s.tensors {
        let e = by_type.entry(t.ty.name()).or_default();
        e.0 += 1;
        e.1 += t.bytes();
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let weights: u64 = s.tensors.iter().map(PlannedTensor::elements).sum();
    let mut text = format!(
        "wrote {} ({}, {} tensors)\n",
        out.display(),
        s.ftype.name(),
        s.tensors.len()
    );
    for (ty, (n, bytes)) in by_type {
        text += &format!("  {ty:<5} {n:>5} tensors {:>10.2} MiB\n", mib(bytes));
    }
    text += &format!(
        "tensor data: {:.2} MiB -> {:.2} MiB ({:.2} bits per weight)\n",
        mib(s.input_bytes),
        mib(s.output_bytes),
        8.0 * s.output_bytes as f64 / weights.max(1) as f64
    );
    text
}
