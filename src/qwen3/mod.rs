//! Chapter 9 — the Qwen3-MoE forward pass on CPU (source S0 5.5, the culmination).
//!
//! The engine composes the chapters: a Hugging Face checkpoint ([`crate::checkpoint`]) and
//! its `config.json` ([`config`]) are mapped onto weight views ([`weights`], per-expert or
//! fused expert layouts, F32/BF16/F16), and [`model`] runs embedding → N × (RMSNorm →
//! grouped-query attention with q/k-norm and RoPE → residual → RMSNorm → MoE or dense MLP →
//! residual) → RMSNorm → LM head, using the RoPE of chapter 1, the frequency scaling of
//! chapter 3 and the router and experts of chapter 5 — no second copy of any of them. A
//! [`kv_cache`] makes decoding one position per step; [`generate`](mod@generate) picks
//! tokens greedily or by seeded temperature / top-p sampling. Logits equal transformers'
//! to ~1e-6. [`finite`] checks what each step produces and names the weight behind a NaN.
//!
//! The same engine runs dense Qwen3 and Qwen2 / Qwen2.5 (`model_type: "qwen2"`): Qwen2 is
//! a variant of the config (q/k/v biases, no q/k norm; see [`config`]), not a second
//! forward pass (tests/qwen2_transformers.rs checks it against `Qwen2ForCausalLM`).
//!
//! It also runs llama.cpp's GGUF files (architectures `qwen3moe`, `qwen3`, `qwen2`): [`open`]
//! takes a `.gguf` as MODEL, the config comes from its metadata ([`gguf_config`]), the
//! tensors from its names ([`gguf_names`], one table read both ways), and [`tensors`] hands
//! the loader block-format matrices that the kernels dequantise block by block, so the
//! default path keeps no dequantised copy. [`Model::with_reference_kernels`] on an
//! [`F32Tensors`] store is the `--reference` pass. tests/gguf_models.rs checks both against
//! transformers' logits on the same dequantised weights.

pub mod config;
pub mod finite;
pub mod generate;
pub mod gguf_config;
pub mod gguf_names;
pub mod kv_cache;
pub mod lost_in_middle;
pub mod model;
pub mod tensors;
pub mod to_gguf;
pub mod trained;
pub mod weights;

pub use config::Qwen3Config;
pub use generate::{GenerateOptions, Sampling, Stepper, generate};
pub use model::{LayerRouting, Logits, Model, Output, Session};
pub use tensors::{F32Tensors, ModelFile, Tensors};

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use serde_json::Value;
use std::path::Path;

/// Opens MODEL: a Hugging Face directory (`config.json` and the safetensors beside it) or a
/// single `.gguf` file (the config read from its metadata, [`gguf_config`]). Build the
/// model with `Model::new(config, &file)`.
pub fn open(path: &Path) -> Result<(Qwen3Config, ModelFile)> {
    let gguf_name = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if gguf_name || (path.is_file() && is_gguf(path)) {
        let g = crate::gguf::Gguf::open(path)?;
        let config = gguf_config::config_from_gguf(&g)?;
        return Ok((config, ModelFile::Gguf(g)));
    }
    if !path.is_dir() {
        let what = match std::fs::metadata(path) {
            Ok(m) => format!(
                "is a {}, not a model directory or .gguf file",
                crate::error::kind_name(m.file_type())
            ),
            Err(_) => "no such model directory or .gguf file".to_string(),
        };
        return Err(crate::Error::Invalid(format!("{}: {what}", path.display())));
    }
    let config = Qwen3Config::from_file(&path.join("config.json"))?;
    let ckpt = Checkpoint::open(path)?;
    Ok((config, ModelFile::Safetensors(ckpt)))
}

/// `anatomy glitch`'s report (chapter 4's screens) with the embedding screens of `model`
/// when given: a Hugging Face checkpoint directory, or a GGUF file (`token_embd.weight`,
/// and `output.weight` unless the head is tied).
pub fn glitch_report(
    tok: &crate::tokenizer::Tokenizer,
    model: Option<&Path>,
    k: usize,
    unused: Option<Vec<u32>>,
) -> Result<crate::tokenizer::glitch::GlitchReport> {
    use crate::tokenizer::glitch;
    let Some(path) = model.filter(|p| is_gguf(p)) else {
        return glitch::report(tok, model, k, unused);
    };
    let mut report = glitch::report(tok, None, k, unused.clone())?;
    let (config, file) = open(path)?;
    let src = Tensors::from(&file);
    let (v, h) = (config.vocab_size, config.hidden_size);
    let what = |hf: &str| {
        let name = gguf_names::to_gguf(hf).map_or_else(|| hf.to_string(), |g| g.name);
        format!("{}: tensor `{name}`", path.display())
    };
    let embed = src.matrix("model.embed_tokens.weight", v, h)?;
    let unembed = match src.contains("lm_head.weight") {
        true => Some(src.matrix("lm_head.weight", v, h)?),
        false => None,
    };
    let unembed_what = what("lm_head.weight");
    report.checkpoint = Some(glitch::screen_matrices(
        &path.display().to_string(),
        (&what("model.embed_tokens.weight"), &embed),
        unembed.as_ref().map(|m| (unembed_what.as_str(), m)),
        tok,
        k,
        unused,
    )?);
    Ok(report)
}

/// The tokenizer of `--vocab` when given, else of a GGUF `--model` (which carries one);
/// anything else is an error saying `--vocab` is needed.
pub fn vocab_or_model_tokenizer(
    vocab: Option<&Path>,
    model: Option<&Path>,
) -> Result<crate::tokenizer::Tokenizer> {
    match (vocab, model) {
        (Some(v), _) => crate::tokenizer::Tokenizer::from_file(v),
        (None, Some(m)) if is_gguf(m) => generate::model_tokenizer(m),
        _ => Err(crate::Error::Invalid(
            "--vocab FILE is required (only a GGUF --model carries its own tokenizer)".into(),
        )),
    }
}

/// Whether MODEL names a GGUF file: a path ending in `.gguf` (whatever it is: opening it
/// then says what is wrong), or a regular file that starts with GGUF's magic.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return true;
    }
    let mut magic = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
        && &magic == b"GGUF"
}

/// Writes logits as a safetensors file with one tensor `"logits"`, F32 `[rows, vocab]`:
/// the header (padded with spaces to a multiple of 8 bytes, as the `safetensors` crate
/// writes it), then the numbers streamed out, so no second copy of them is made. Through
/// [`crate::output::write_output`]: a regular file is replaced atomically, a device or FIFO
/// written through, a symbolic link or directory refused. A failed write is not the
/// input's fault: it exits 1, not 2.
pub fn save_logits(path: &Path, out: &Output, vocab: usize) -> Result<()> {
    let n = out
        .rows
        .checked_mul(vocab)
        .filter(|&n| n == out.logits.len());
    let Some(n) = n else {
        return Err(crate::Error::Invalid(format!(
            "logits tensor: {} values for shape [{}, {vocab}]",
            out.logits.len(),
            out.rows
        )));
    };
    let mut header = format!(
        r#"{{"logits":{{"dtype":"F32","shape":[{},{vocab}],"data_offsets":[0,{}]}}}}"#,
        out.rows,
        4 * n as u128
    )
    .into_bytes();
    header.resize(header.len().div_ceil(8) * 8, b' ');
    crate::output::write_output(path, |w| {
        w.write_all(&(header.len() as u64).to_le_bytes())?;
        w.write_all(&header)?;
        let mut buf = Vec::with_capacity(4 * 4096);
        for chunk in out.logits.chunks(4096) {
            buf.clear();
            buf.extend(chunk.iter().flat_map(|x| x.to_le_bytes()));
            w.write_all(&buf)?;
        }
        Ok(())
    })
}

/// One position's routing in one MoE layer, for reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PositionRouting {
    pub position: usize,
    pub token: u32,
    pub experts: Vec<usize>,
    pub weights: Vec<f32>,
}

/// One MoE layer's routing over a prompt, and how many tokens each expert received.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LayerReport {
    pub layer: usize,
    pub positions: Vec<PositionRouting>,
    pub tokens_per_expert: Vec<usize>,
}

/// `anatomy router-stats`: per MoE layer, per position, the chosen experts and weights.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RouterReport {
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub layers: Vec<LayerReport>,
}

/// Collects the routing of a forward call over `ids` into a report.
pub fn router_report(config: &Qwen3Config, ids: &[u32], out: &Output) -> RouterReport {
    let layers = out
        .routing
        .iter()
        .map(|lr| {
            let mut tokens_per_expert = vec![0; config.num_experts];
            let positions = lr
                .routing
                .iter()
                .zip(ids)
                .enumerate()
                .map(|(position, (r, &token))| {
                    for &e in &r.experts {
                        tokens_per_expert[e] += 1;
                    }
                    PositionRouting {
                        position,
                        token,
                        experts: r.experts.clone(),
                        weights: r.weights.clone(),
                    }
                })
                .collect();
            LayerReport {
                layer: lr.layer,
                positions,
                tokens_per_expert,
            }
        })
        .collect();
    RouterReport {
        num_experts: config.num_experts,
        num_experts_per_tok: config.num_experts_per_tok,
        layers,
    }
}

/// The report as a table: one row per position (with the token's text when `text` is
/// given), one column per MoE layer listing `expert:weight`, then the load per expert.
pub fn router_text(report: &RouterReport, text: Option<&dyn Fn(u32) -> String>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let Some(first) = report.layers.first() else {
        return "no MoE layers (a dense model)\n".to_string();
    };
    let _ = write!(s, "{:>4} {:>7} {:<14}", "pos", "id", "token");
    for l in &report.layers {
        let _ = write!(s, " | layer {:<2} expert:weight     ", l.layer);
    }
    s.push('\n');
    for p in 0..first.positions.len() {
        let tok = first.positions[p].token;
        let shown = text.map(|f| format!("{:?}", f(tok))).unwrap_or_default();
        let _ = write!(s, "{p:>4} {tok:>7} {shown:<14}");
        for l in &report.layers {
            let r = &l.positions[p];
            let cell: Vec<String> = r
                .experts
                .iter()
                .zip(&r.weights)
                .map(|(e, w)| format!("{e}:{w:.2}"))
                .collect();
            let _ = write!(s, " | {:<25}", cell.join(" "));
        }
        s.push('\n');
    }
    for l in &report.layers {
        let _ = writeln!(
            s,
            "layer {:>2} tokens per expert: {:?}",
            l.layer, l.tokens_per_expert
        );
    }
    s
}

/// Where the bundled tiny checkpoint lives.
pub fn bundled_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/tiny-qwen3-moe")
}

/// The sentence the tour routes through the bundled model: punctuation, nouns and verbs.
pub const TOUR_TEXT: &str = " The small cat saw a bird, and the dog heard the river.";

/// The bundled checkpoint run end to end, as `anatomy tour` shows it: the greedy
/// continuation checked against transformers' (data/tiny-qwen3-moe/transformers_check.json),
/// then [`TOUR_TEXT`] tokenised with the Qwen vocabulary, routed, and continued.
pub fn tour_demo() -> Result<String> {
    use std::fmt::Write;
    let dir = bundled_dir();
    let (config, ckpt) = open(&dir)?;
    let model = Model::new(config, &ckpt)?;
    let c = &model.config;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "bundled checkpoint {}: {} layers, hidden {}, {} heads × {} (KV {}), {} experts top-{}, vocab {}, {} ({:.1} MB)",
        dir.display(),
        c.num_hidden_layers,
        c.hidden_size,
        c.num_attention_heads,
        c.head_dim,
        c.num_key_value_heads,
        c.num_experts,
        c.num_experts_per_tok,
        c.vocab_size,
        c.dtype.as_deref().unwrap_or("?"),
        ckpt.data_bytes() as f64 / 1e6
    );

    // 1. The same greedy tokens as transformers on the generator's prompt.
    let check = crate::error::read_json(&dir.join("transformers_check.json"))?;
    let ids = |key: &str| -> Result<Vec<u32>> {
        check[key]
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_u64().map(|x| x as u32)).collect())
            .ok_or_else(|| crate::Error::field("transformers_check.json", key, "not a list of ids"))
    };
    let (prompt, want) = (ids("prompt")?, ids("greedy")?);
    let opts = GenerateOptions {
        max_new_tokens: want.len(),
        sampling: Sampling::Greedy,
        stop: vec![],
    };
    let got = generate(&model, &prompt, &opts, |_| {})?;
    let _ = writeln!(
        s,
        "greedy continuation of {prompt:?}: {got:?} — transformers 5.24: {want:?} ({})",
        if got == want { "equal" } else { "DIFFERENT" }
    );
    if got != want {
        return Err(crate::Error::Invalid(
            "the bundled model's greedy tokens differ from transformers'".into(),
        ));
    }

    // 2. Text → Qwen token ids → routing of every token in every MoE layer.
    let tok = crate::tokenizer::Tokenizer::qwen()?;
    let text_ids = tok.encode(TOUR_TEXT)?;
    let out = model.logits(&text_ids)?;
    let report = router_report(c, &text_ids, &out);
    let show = |id: u32| {
        tok.token_bytes(id)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let _ = writeln!(s, "router statistics for {TOUR_TEXT:?}:");
    s.push_str(&router_text(&report, Some(&show)));
    let cont = generate(
        &model,
        &text_ids,
        &GenerateOptions {
            max_new_tokens: 8,
            ..opts
        },
        |_| {},
    )?;
    let _ = writeln!(
        s,
        "greedy continuation: {cont:?} = {:?}",
        tok.decode(&cont)?
    );

    // 3. The overview's exercise: which experts do the word classes go to?
    let classes = word_class_routing(&model, &tok)?;
    s.push_str(&class_text(&classes));

    // 4. The whole pipeline a chat model runs: template → ids → forward → generate. The toy
    // model never saw ChatML, so its answer is noise; the point is the plumbing.
    let message = |role: &str, text: &str| crate::chat::template::Message {
        role: role.into(),
        content: crate::chat::template::Content::Text(text.into()),
        reasoning_content: None,
        tool_calls: vec![],
    };
    let prompt = crate::chat::template::render(
        &[
            message("system", "You are a helpful assistant."),
            message("user", "Name an animal."),
        ],
        &[],
        &crate::chat::template::ChatOptions {
            add_generation_prompt: true,
            enable_thinking: Some(false),
        },
    )?;
    let chat_ids = tok.encode(&prompt)?;
    let answer = generate(
        &model,
        &chat_ids,
        &GenerateOptions {
            max_new_tokens: 6,
            sampling: Sampling::Greedy,
            stop: vec![],
        },
        |_| {},
    )?;
    let _ = writeln!(
        s,
        "chat template → {} ids (first {:?}, <|im_start|> = 151644) → forward → greedy {:?} = {:?} (the toy model was not trained on chat)",
        chat_ids.len(),
        &chat_ids[..3.min(chat_ids.len())],
        answer,
        tok.decode(&answer)?
    );
    Ok(s)
}

/// Where each word class goes: per MoE layer, per class, the share of the class's expert
/// slots (k per token) that each expert received, over the held-out sentences of the
/// bundled model's toy grammar (data/tiny-qwen3-moe/word_classes.json).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClassRouting {
    /// What text was routed.
    pub source: String,
    pub classes: Vec<String>,
    /// Tokens of each class.
    pub tokens: Vec<usize>,
    /// `(layer, share[class][expert])`.
    pub layers: Vec<(usize, Vec<Vec<f64>>)>,
    /// Fraction of (layer, position) pairs whose top-k set equals transformers'.
    pub agreement_with_transformers: f64,
}

/// Routes the held-out toy-grammar text through `model` (tokenised by `tok`, which must
/// give the generator's ids) and tallies the experts each word class was sent to.
pub fn word_class_routing(
    model: &Model,
    tok: &crate::tokenizer::Tokenizer,
) -> Result<ClassRouting> {
    let path = bundled_dir().join("word_classes.json");
    word_class_routing_file(model, tok, &path, "held-out toy-grammar text")
}

/// [`word_class_routing`] over the text, classes and transformers' top-k sets of a
/// `word_classes.json` written by a generator script; `source` names the text.
pub fn word_class_routing_file(
    model: &Model,
    tok: &crate::tokenizer::Tokenizer,
    path: &Path,
    source: &str,
) -> Result<ClassRouting> {
    let what = path.display().to_string();
    let doc = crate::error::read_json(path)?;
    let text = doc["text"]
        .as_str()
        .ok_or_else(|| crate::Error::field(&what, "text", "not a string"))?;
    let want: Option<Vec<u32>> = doc["ids"]
        .as_array()
        .and_then(|a| a.iter().map(|v| v.as_u64().map(|x| x as u32)).collect());
    let labels: Option<Vec<&str>> = doc["classes"]
        .as_array()
        .and_then(|a| a.iter().map(Value::as_str).collect());
    let (Some(want), Some(labels)) = (want, labels) else {
        return Err(crate::Error::field(
            &what,
            "ids/classes",
            "not lists of ids / names",
        ));
    };
    let ids = tok.encode(text)?;
    if ids != want || labels.len() != ids.len() {
        return Err(crate::Error::Invalid(format!(
            "{what}: the tokenizer does not reproduce the generator's ids"
        )));
    }
    let out = model.logits(&ids)?;
    let mut classes: Vec<String> = Vec::new();
    for l in &labels {
        if !classes.iter().any(|c| c == l) {
            classes.push(l.to_string());
        }
    }
    let class_of: Vec<usize> = labels
        .iter()
        .map(|l| classes.iter().position(|c| c == l).unwrap_or(0))
        .collect();
    let mut tokens = vec![0; classes.len()];
    for &c in &class_of {
        tokens[c] += 1;
    }
    let (mut same, mut total) = (0usize, 0usize);
    let mut layers = Vec::new();
    for lr in &out.routing {
        let mut counts = vec![vec![0.0f64; model.config.num_experts]; classes.len()];
        let reference = &doc["router_topk"][lr.layer.to_string()];
        for (p, r) in lr.routing.iter().enumerate() {
            for &e in &r.experts {
                counts[class_of[p]][e] += 1.0;
            }
            let mut ours = r.experts.clone();
            ours.sort_unstable();
            let mut theirs: Vec<usize> = reference[p]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_u64().map(|x| x as usize))
                        .collect()
                })
                .unwrap_or_default();
            theirs.sort_unstable();
            same += usize::from(ours == theirs);
            total += 1;
        }
        for row in &mut counts {
            let sum: f64 = row.iter().sum();
            row.iter_mut().for_each(|x| *x /= sum.max(1.0));
        }
        layers.push((lr.layer, counts));
    }
    Ok(ClassRouting {
        source: source.to_string(),
        classes,
        tokens,
        layers,
        agreement_with_transformers: same as f64 / total.max(1) as f64,
    })
}

/// The class table as text: one block per layer, one row per class, shares in percent.
pub fn class_text(r: &ClassRouting) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "which experts each word class goes to ({}; % of the class's expert slots; top-k sets equal transformers' at {:.1}% of positions):",
        r.source,
        100.0 * r.agreement_with_transformers
    );
    for (layer, shares) in &r.layers {
        let experts = shares.first().map_or(0, Vec::len);
        let _ = write!(s, "  layer {layer:<2} {:>16}", "class (tokens)");
        for e in 0..experts {
            let _ = write!(s, " {:>5}", format!("e{e}"));
        }
        s.push('\n');
        for ((class, row), n) in r.classes.iter().zip(shares).zip(&r.tokens) {
            let _ = write!(s, "           {:>16}", format!("{class} ({n})"));
            for x in row {
                if *x == 0.0 {
                    let _ = write!(s, " {:>5}", "·");
                } else {
                    let _ = write!(s, " {:>5.0}", 100.0 * x);
                }
            }
            s.push('\n');
        }
    }
    s
}
