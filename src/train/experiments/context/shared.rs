//! Chapter 13.2 — what the context experiments share: their sizes, the corpus split by
//! language, the base run and the four long-text fine-tunes (cached: each is a pure
//! function of its options and the corpus), and the machine record of `results.json`.

use super::super::ExperimentOptions;
pub use super::eval::BASE_THETA;
use super::eval::Scaling;
use crate::error::{Error, Result};
use crate::qwen3::config::Qwen3Config;
use crate::train::data::load_corpus;
use crate::train::params::Params;
use crate::train::trainer::{StepLog, TrainOptions, TrainState, train};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The sizes of every run and evaluation (recorded or `--short`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sizes {
    /// The trained context `L` (the base model's `seq_len`).
    pub train_len: usize,
    pub base_steps: u64,
    pub base_batch: usize,
    /// Steps and batch of the fine-tunes at `4L`.
    pub long_steps: u64,
    pub long_batch: usize,
    /// Steps of each router fine-tune (at `L`, batch `base_batch`) and the evaluation
    /// interval.
    pub router_steps: u64,
    pub router_eval_every: u64,
    /// Held-out windows of `8L` for the by-position curves, and of `L` for short text.
    pub long_windows: usize,
    pub short_windows: usize,
    /// Held-out batches for the router runs' losses.
    pub eval_batches: usize,
    /// Tokens of a greedy continuation, and the prompt's length.
    pub sample_tokens: usize,
    pub sample_prompt: usize,
}

impl Sizes {
    pub fn new(short: bool) -> Sizes {
        if short {
            Sizes {
                train_len: 16,
                base_steps: 3,
                base_batch: 2,
                long_steps: 2,
                long_batch: 1,
                router_steps: 2,
                router_eval_every: 1,
                long_windows: 1,
                short_windows: 2,
                eval_batches: 1,
                sample_tokens: 4,
                sample_prompt: 24,
            }
        } else {
            Sizes {
                train_len: 64,
                base_steps: 400,
                base_batch: 4,
                long_steps: 50,
                long_batch: 1,
                router_steps: 40,
                router_eval_every: 5,
                long_windows: 12,
                short_windows: 64,
                eval_batches: 4,
                sample_tokens: 32,
                sample_prompt: 160,
            }
        }
    }

    /// The longest window evaluated: `8L`.
    pub fn max_len(&self) -> usize {
        8 * self.train_len
    }
}

/// The base run's seed (every other run continues from it with its own seed).
pub const SEED: u64 = 17;

/// Where a run's numbers came from and what decided it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    pub name: String,
    /// "en" or "zh": the corpus half it trained on.
    pub domain: String,
    /// The run it started from (`None` = a fresh model drawn from the seed).
    pub init_from: Option<String>,
    pub rope: Scaling,
    pub frozen_router: bool,
    pub options: TrainOptions,
    /// Seconds its training took when it was trained (also when this file reused it).
    pub train_wall_s: f64,
    pub from_cache: bool,
    /// Every few steps: (step, training loss, held-out loss when evaluated).
    pub log: Vec<(u64, f32, Option<f32>)>,
}

/// The machine and source of a `results.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cpu_flags: Vec<String>,
    pub threads: usize,
    pub git_commit: Option<String>,
}

impl Machine {
    pub fn here() -> Machine {
        let (model, flags) = super::super::cpu();
        let wanted = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16"];
        let cpu_flags = flags
            .into_iter()
            .filter(|x| wanted.contains(&x.as_str()))
            .collect();
        let git_commit = super::super::git_commit();
        Machine {
            cpu: model.unwrap_or_else(|| "unknown".into()),
            cpu_flags,
            threads: rayon::current_num_threads(),
            git_commit,
        }
    }
}

/// The corpus's training and held-out streams, split by language directory.
pub struct Domains {
    pub en_train: Vec<u32>,
    pub en_heldout: Vec<u32>,
    pub zh_train: Vec<u32>,
    pub zh_heldout: Vec<u32>,
}

/// Loads the corpus with the trainer's own held-out split (the one `anatomy train` uses)
/// and splits each stream by the documents' top directory (`en/`, `zh/`).
pub fn load_domains(opts: &ExperimentOptions) -> Result<Domains> {
    let tok = crate::tokenizer::Tokenizer::from_file(&opts.vocab)?;
    let heldout_fraction = TrainOptions::default().heldout_fraction;
    let corpus = load_corpus(&opts.data, &tok, heldout_fraction)?;
    let mut d = Domains {
        en_train: Vec::new(),
        en_heldout: Vec::new(),
        zh_train: Vec::new(),
        zh_heldout: Vec::new(),
    };
    let (mut at_train, mut at_heldout) = (0, 0);
    for s in &corpus.sources {
        let zh = s.path.starts_with("zh");
        let (stream, at, out) = match (s.heldout, zh) {
            (false, false) => (&corpus.train, &mut at_train, &mut d.en_train),
            (false, true) => (&corpus.train, &mut at_train, &mut d.zh_train),
            (true, false) => (&corpus.heldout, &mut at_heldout, &mut d.en_heldout),
            (true, true) => (&corpus.heldout, &mut at_heldout, &mut d.zh_heldout),
        };
        out.extend_from_slice(&stream[*at..*at + s.tokens]);
        *at += s.tokens;
    }
    for (what, s) in [
        ("en/ training", &d.en_train),
        ("en/ held-out", &d.en_heldout),
        ("zh/ training", &d.zh_train),
        ("zh/ held-out", &d.zh_heldout),
    ] {
        if s.is_empty() {
            return Err(Error::Invalid(format!(
                "experiments: the corpus {} has no {what} documents",
                opts.data.display()
            )));
        }
    }
    Ok(d)
}

/// The model of every context run: the default config with the RoPE base
/// `BASE_THETA`, `max_position_embeddings` = `8L`, and `rope` as the scaling.
pub fn model_config(sizes: &Sizes, rope: &Scaling) -> Result<Qwen3Config> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/train/qwen3-moe-anatomy.json");
    let mut c = Qwen3Config::from_file(&path)?;
    c.max_position_embeddings = sizes.max_len();
    c.rope = rope.rope_config(c.head_dim, sizes.train_len)?;
    Ok(c)
}

/// A trained model with its record.
pub struct Trained {
    pub params: Params,
    pub record: RunRecord,
}

/// The base options of a run (the rest as `anatomy train`'s defaults).
pub fn options(steps: u64, batch: usize, seq_len: usize, lr: f64, seed: u64) -> TrainOptions {
    TrainOptions {
        steps,
        batch_size: batch,
        seq_len,
        adamw_lr: lr,
        muon_lr: lr,
        warmup_steps: (steps / 10).max(1),
        seed,
        eval_every: 0,
        eval_batches: 2,
        checkpoint_every: 0,
        ..TrainOptions::default()
    }
}

/// The base: a fresh model trained on the English training stream at length `L`.
pub fn base(sizes: &Sizes, d: &Domains) -> Result<Trained> {
    let o = options(
        sizes.base_steps,
        sizes.base_batch,
        sizes.train_len,
        5e-3,
        SEED,
    );
    let spec = Spec {
        name: "base".into(),
        domain: "en".into(),
        init_from: None,
        rope: Scaling::None,
        frozen_router: false,
        options: o,
    };
    cached(sizes, &spec, None, &d.en_train, &d.en_heldout)
}

/// A fine-tune of the base at `4L` on English with `rope` set in the config.
pub fn long_finetune(
    sizes: &Sizes,
    d: &Domains,
    base: &Trained,
    name: &str,
    rope: Scaling,
) -> Result<Trained> {
    let o = options(
        sizes.long_steps,
        sizes.long_batch,
        4 * sizes.train_len,
        1e-3,
        SEED + 1,
    );
    let spec = Spec {
        name: name.into(),
        domain: "en".into(),
        init_from: Some(base.record.name.clone()),
        rope,
        frozen_router: false,
        options: o,
    };
    cached(sizes, &spec, Some(base), &d.en_train, &d.en_heldout)
}

/// What decides a cached run.
#[derive(Clone, Debug, Serialize)]
struct Spec {
    name: String,
    domain: String,
    init_from: Option<String>,
    rope: Scaling,
    frozen_router: bool,
    options: TrainOptions,
}

/// What the cache keeps beside the model.
#[derive(Serialize, Deserialize)]
struct CacheRecord {
    train_wall_s: f64,
    log: Vec<(u64, f32, Option<f32>)>,
}

/// Trains `spec` (from `init`'s parameters, or fresh) unless the cache has it.
fn cached(
    sizes: &Sizes,
    spec: &Spec,
    init: Option<&Trained>,
    train_tokens: &[u32],
    heldout: &[u32],
) -> Result<Trained> {
    let key = cache_key(spec, sizes, init, train_tokens, heldout)?;
    let dir = cache_root().join(format!("{}-{key:016x}", spec.name));
    let record_path = dir.join("run.json");
    if let (Ok(bytes), Ok(params)) = (std::fs::read(&record_path), Params::load(&dir))
        && let Ok(r) = serde_json::from_slice::<CacheRecord>(&bytes)
    {
        return Ok(Trained {
            params,
            record: record(spec, r.train_wall_s, true, r.log),
        });
    }
    let config = model_config(sizes, &spec.rope)?;
    let params = match init {
        Some(t) => {
            let mut p = t.params.clone();
            p.config = config;
            p
        }
        None => Params::init(&config, spec.options.seed)?,
    };
    let mut state = TrainState::new(params, spec.options.clone())?;
    if spec.frozen_router {
        state.freeze_router();
    }
    // Train into a private directory and rename it into place: two processes training the
    // same run at once both succeed, and neither reads the other's half-written files.
    let scratch = cache_root().join(format!(
        ".{}-{key:016x}-{}-{:?}",
        spec.name,
        std::process::id(),
        std::thread::current().id()
    ));
    let start = Instant::now();
    let logs = train(
        &mut state,
        train_tokens,
        heldout,
        &scratch,
        spec.options.steps,
        false,
    )?;
    let wall = start.elapsed().as_secs_f64();
    let log = compact_log(&logs, log_every(spec.options.steps));
    let r = CacheRecord {
        train_wall_s: wall,
        log: log.clone(),
    };
    write_json(&scratch.join("run.json"), &r)?;
    if std::fs::rename(&scratch, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    Ok(Trained {
        params: state.params,
        record: record(spec, wall, false, log),
    })
}

fn record(
    spec: &Spec,
    wall: f64,
    from_cache: bool,
    log: Vec<(u64, f32, Option<f32>)>,
) -> RunRecord {
    RunRecord {
        name: spec.name.clone(),
        domain: spec.domain.clone(),
        init_from: spec.init_from.clone(),
        rope: spec.rope.clone(),
        frozen_router: spec.frozen_router,
        options: spec.options.clone(),
        train_wall_s: wall,
        from_cache,
        log,
    }
}

/// About 30 points per run's curve.
pub fn log_every(steps: u64) -> u64 {
    (steps / 30).max(1)
}

/// Every `every`-th step and the last, with its held-out loss when it has one.
pub fn compact_log(logs: &[StepLog], every: u64) -> Vec<(u64, f32, Option<f32>)> {
    logs.iter()
        .enumerate()
        .filter(|(i, l)| {
            l.step.is_multiple_of(every) || l.heldout_loss.is_some() || *i + 1 == logs.len()
        })
        .map(|(_, l)| (l.step, l.loss, l.heldout_loss))
        .collect()
}

fn cache_root() -> PathBuf {
    std::env::temp_dir().join("llm-anatomy-context-runs")
}

/// FNV-1a over the spec, the sizes, the parent's key and both token streams.
fn cache_key(
    spec: &Spec,
    sizes: &Sizes,
    init: Option<&Trained>,
    train_tokens: &[u32],
    heldout: &[u32],
) -> Result<u64> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    let json = |v: serde_json::Result<String>| {
        v.map_err(|e| Error::Invalid(format!("experiments: cache key: {e}")))
    };
    eat(json(serde_json::to_string(spec))?.as_bytes());
    eat(json(serde_json::to_string(sizes))?.as_bytes());
    eat(env!("CARGO_PKG_VERSION").as_bytes());
    if let Some(t) = init {
        // The parent's parameters themselves, sampled: a changed parent changes the key.
        for p in &t.params.params {
            for x in p.data.iter().step_by(97) {
                eat(&x.to_le_bytes());
            }
        }
    }
    for s in [train_tokens, heldout] {
        eat(&(s.len() as u64).to_le_bytes());
        for t in s {
            eat(&t.to_le_bytes());
        }
    }
    Ok(h)
}

/// Writes `value` as pretty JSON to `path`, creating its directory.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let write = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(write)?;
    }
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
    std::fs::write(path, text + "\n").map_err(write)
}
