//! RoPE frequency scaling for length extrapolation (source S0 5.2, S1 §2), following
//! Hugging Face transformers' `modeling_rope_utils.py` (5.x) so a `rope_scaling` /
//! `rope_parameters` object from any config.json gives the same `inv_freq` and
//! `attention_factor` as transformers' own RoPE initialisation.
//!
//! * PI ("linear"): every `θ_i` divided by the factor `s` — position `m` acts as `m/s`.
//! * NTK-aware ("dynamic" recomputes it from the current length): the base grows to
//!   `base·s^{d/(d−2)}`, so the fastest plane keeps its speed and the slowest is divided
//!   by exactly `s`.
//! * YaRN: planes that turn more than `beta_fast` times over the original context keep
//!   their speed, planes that turn fewer than `beta_slow` times are interpolated by `s`, a
//!   linear ramp in between; logits are sharpened by `attention_factor = 0.1·ln s + 1`.
//! * llama3: the same idea with wavelength thresholds `L/low_freq_factor` and
//!   `L/high_freq_factor`.
//! * LongRoPE: per-plane factors (short or long set, chosen by the sequence length).
//!
//! Claims backed: `ext.pi`, `ext.pi_resolution`, `ext.ntk_base`, `ext.ntk_direction`,
//! `ext.ntk_example`, `ext.yarn_bands`, `ext.direct_ood`, `ext.s1_4k_32k`, `ext.deepseek_v3`,
//! `ext.deepseek_theta`, `ext.yarn_adopters`.

use crate::error::{Error, Result};
use crate::json::Fields;
use crate::limits;
use crate::position::rope::{inv_freq as default_inv_freq, wavelength};
use serde_json::Value;

/// YaRN's parameters, with transformers' defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct Yarn {
    pub factor: f64,
    pub original_max_position_embeddings: usize,
    pub beta_fast: f64,
    pub beta_slow: f64,
    pub mscale: Option<f64>,
    pub mscale_all_dim: Option<f64>,
    pub attention_factor: Option<f64>,
    pub truncate: bool,
}

/// llama3's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Llama3 {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: usize,
}

/// LongRoPE's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct LongRope {
    pub short_factor: Vec<f64>,
    pub long_factor: Vec<f64>,
    pub factor: f64,
    pub attention_factor: Option<f64>,
    pub original_max_position_embeddings: usize,
}

// ANCHOR: scaling_enum
/// Which frequency schedule a model uses.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    Default,
    Linear {
        factor: f64,
    },
    Dynamic {
        factor: f64,
    },
    Yarn(Yarn),
    Llama3(Llama3),
    LongRope(LongRope),
    /// transformers' "proportional": only a fraction of the planes rotate, the rest get
    /// frequency 0, and all frequencies are divided by `factor`.
    Proportional {
        factor: f64,
    },
}
// ANCHOR_END: scaling_enum

/// Everything that fixes a model's RoPE frequencies.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    pub theta: f64,
    /// The attention head dimension.
    pub head_dim: usize,
    /// Fraction of the head dimension that rotates (1 unless partial RoPE).
    pub partial_rotary_factor: f64,
    /// The model's `max_position_embeddings` (needed by dynamic NTK and as YaRN's default
    /// original length).
    pub max_position_embeddings: Option<usize>,
    pub scaling: RopeScaling,
}

/// The result of a RoPE initialisation, as transformers' `ROPE_INIT_FUNCTIONS` return it.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeInit {
    pub inv_freq: Vec<f64>,
    pub attention_factor: f64,
}

fn check_theta(theta: f64, what: &str) -> Result<f64> {
    if theta.is_finite() && theta > 1.0 {
        Ok(theta)
    } else {
        Err(Error::field(
            what,
            "rope_theta",
            format!("must be a number > 1, got {theta}"),
        ))
    }
}

fn check_lengths(
    head_dim: usize,
    max_position_embeddings: Option<usize>,
    what: &str,
) -> Result<()> {
    if head_dim < 2 || !head_dim.is_multiple_of(2) {
        return Err(Error::field(
            what,
            "head_dim",
            format!("must be even and ≥ 2, got {head_dim}"),
        ));
    }
    limits::check(what, "field `head_dim`", head_dim as u128, limits::HEADS)?;
    if let Some(m) = max_position_embeddings {
        if m == 0 {
            return Err(Error::field(
                what,
                "max_position_embeddings",
                "must be at least 1",
            ));
        }
        limits::check(
            what,
            "field `max_position_embeddings`",
            m as u128,
            limits::POSITIONS,
        )?;
    }
    Ok(())
}

/// The object's `rope_type` (or older `type`), `"default"` when it has neither.
fn rope_type<'a>(f: &Fields<'a>) -> Result<&'a str> {
    f.raw("rope_type")
        .or_else(|| f.raw("type"))
        .map(|v| {
            v.as_str().ok_or_else(|| {
                Error::field(f.what(), "rope_type", format!("expected a string, got {v}"))
            })
        })
        .transpose()
        .map(|kind| kind.unwrap_or("default"))
}

/// The lengths and factor every schedule reads: the object's `factor`, the model's
/// `max_position_embeddings`, and the original training length (the object's, else the
/// model's).
struct Lengths {
    factor: Option<f64>,
    max: Option<usize>,
    original: Option<usize>,
}

impl Lengths {
    fn original(&self, f: &Fields) -> Result<usize> {
        self.original.ok_or_else(|| {
            f.error(
                "original_max_position_embeddings",
                "missing (and no max_position_embeddings to default to)",
            )
        })
    }
}

/// The schedule of rope type `kind`, read from `f`; `planes` is the rotary planes' count.
fn read_scaling(kind: &str, f: &Fields, lengths: &Lengths, planes: usize) -> Result<RopeScaling> {
    Ok(match kind {
        "default" => RopeScaling::Default,
        "linear" => RopeScaling::Linear {
            factor: f.req_positive_f64("factor")?,
        },
        "dynamic" => {
            if lengths.max.is_none() {
                return Err(f.error(
                    "max_position_embeddings",
                    "dynamic NTK needs the model's max_position_embeddings",
                ));
            }
            RopeScaling::Dynamic {
                factor: f.req_positive_f64("factor")?,
            }
        }
        "yarn" => RopeScaling::Yarn(read_yarn(f, lengths)?),
        "llama3" => RopeScaling::Llama3(read_llama3(f, lengths)?),
        "longrope" | "su" => RopeScaling::LongRope(read_longrope(f, lengths, planes)?),
        "proportional" => RopeScaling::Proportional {
            factor: match lengths.factor {
                Some(_) => f.req_positive_f64("factor")?,
                None => 1.0,
            },
        },
        other => {
            return Err(f.error(
                "rope_type",
                format!(
                    "unknown rope type {other:?} (known: default, linear, dynamic, yarn, llama3, longrope, proportional)"
                ),
            ));
        }
    })
}

fn read_yarn(f: &Fields, lengths: &Lengths) -> Result<Yarn> {
    let original = lengths.original(f)?;
    // transformers requires the key; only an explicit `null` (DeepSeek style) means
    // "max_position_embeddings / original_max_position_embeddings".
    let factor = match (f.raw("factor"), lengths.factor) {
        (None, _) => return Err(f.error("factor", "missing")),
        (Some(_), Some(_)) => f.req_positive_f64("factor")?,
        (Some(_), None) => match lengths.max {
            Some(m) => m as f64 / original as f64,
            None => {
                return Err(f.error(
                    "factor",
                    "null needs max_position_embeddings to take the ratio from",
                ));
            }
        },
    };
    let nonzero = |v: Option<f64>| v.filter(|x| *x != 0.0);
    Ok(Yarn {
        factor,
        original_max_position_embeddings: original,
        beta_fast: nonzero(f.opt_f64("beta_fast")?).unwrap_or(32.0),
        beta_slow: nonzero(f.opt_f64("beta_slow")?).unwrap_or(1.0),
        mscale: f.opt_f64("mscale")?,
        mscale_all_dim: f.opt_f64("mscale_all_dim")?,
        attention_factor: opt_positive(f, "attention_factor")?,
        truncate: f.opt_bool("truncate")?.unwrap_or(true),
    })
}

fn read_llama3(f: &Fields, lengths: &Lengths) -> Result<Llama3> {
    let l = Llama3 {
        factor: f.req_positive_f64("factor")?,
        low_freq_factor: f.req_positive_f64("low_freq_factor")?,
        high_freq_factor: f.req_positive_f64("high_freq_factor")?,
        original_max_position_embeddings: lengths.original(f)?,
    };
    // The smooth band divides by their difference.
    if l.high_freq_factor == l.low_freq_factor {
        return Err(f.error(
            "high_freq_factor",
            "must differ from low_freq_factor (the blend divides by their difference)",
        ));
    }
    Ok(l)
}

fn read_longrope(f: &Fields, lengths: &Lengths, planes: usize) -> Result<LongRope> {
    let original = lengths.original(f)?;
    let factor = match (lengths.factor, lengths.max) {
        (Some(f), _) => f,
        (None, Some(m)) => m as f64 / original as f64,
        (None, None) => return Err(f.error("factor", "missing")),
    };
    if !(factor.is_finite() && factor > 0.0) {
        return Err(f.error("factor", format!("must be a positive number, got {factor}")));
    }
    Ok(LongRope {
        short_factor: plane_factors(f, "short_factor", planes)?,
        long_factor: plane_factors(f, "long_factor", planes)?,
        factor,
        attention_factor: opt_positive(f, "attention_factor")?,
        original_max_position_embeddings: original,
    })
}

/// LongRoPE's list `key`: one positive factor per rotary plane.
fn plane_factors(f: &Fields, key: &str, planes: usize) -> Result<Vec<f64>> {
    let v = f.req_f64_list(key)?;
    if let Some((i, x)) = v.iter().enumerate().find(|(_, x)| x.is_nan() || **x <= 0.0) {
        return Err(f.error(
            key,
            format!("factor {i} is {x}; every factor must be a positive number"),
        ));
    }
    if v.len() != planes {
        return Err(f.error(
            key,
            format!("{} factors given for {planes} rotary planes", v.len()),
        ));
    }
    Ok(v)
}

impl RopeConfig {
    /// Builds a config from a head dimension, a base, an optional Hugging Face
    /// `rope_scaling` / `rope_parameters` object (`"type"` or `"rope_type"` key) and the
    /// model's `max_position_embeddings`. `what` names the source in errors.
    pub fn new(
        head_dim: usize,
        theta: f64,
        scaling: Option<&Value>,
        max_position_embeddings: Option<usize>,
        what: &str,
    ) -> Result<Self> {
        check_lengths(head_dim, max_position_embeddings, what)?;
        let mut cfg = RopeConfig {
            theta: check_theta(theta, what)?,
            head_dim,
            partial_rotary_factor: 1.0,
            max_position_embeddings,
            scaling: RopeScaling::Default,
        };
        let Some(obj) = scaling.filter(|v| !v.is_null()) else {
            cfg.check_frequencies(what)?;
            return Ok(cfg);
        };
        if !obj.is_object() {
            return Err(Error::field(
                what,
                "rope_scaling",
                format!("expected an object, got {obj}"),
            ));
        }
        let f = Fields::new(what, obj);
        cfg.read_base(&f)?;
        let kind = rope_type(&f)?;
        let lengths = Lengths {
            factor: f.opt_f64("factor")?,
            max: max_position_embeddings,
            original: f
                .opt_whole("original_max_position_embeddings")?
                .or(max_position_embeddings),
        };
        cfg.scaling = read_scaling(kind, &f, &lengths, cfg.rotary_dim() / 2)?;
        cfg.check_frequencies(what)?;
        Ok(cfg)
    }

    /// The base and the rotating fraction a `rope_parameters` object may carry
    /// (transformers 5 keeps the base there, and there it wins).
    fn read_base(&mut self, f: &Fields) -> Result<()> {
        if let Some(t) = f.opt_f64("rope_theta")? {
            self.theta = check_theta(t, f.what())?;
        }
        if let Some(p) = f.opt_f64("partial_rotary_factor")? {
            if !(p > 0.0 && p <= 1.0) {
                return Err(f.error(
                    "partial_rotary_factor",
                    format!("must be in (0, 1], got {p}"),
                ));
            }
            self.partial_rotary_factor = p;
        }
        Ok(())
    }

    /// Computes the frequencies once at initialisation and once past the original length
    /// (where dynamic NTK and LongRoPE switch), so that factors which are each valid but
    /// together give NaN, infinite or negative frequencies (a linear factor of 1e-300, an
    /// mscale that makes the attention factor 0) are an error naming the document now.
    fn check_frequencies(&self, what: &str) -> Result<()> {
        let long = match &self.scaling {
            RopeScaling::LongRope(l) => Some(l.original_max_position_embeddings + 1),
            RopeScaling::Dynamic { .. } => {
                self.max_position_embeddings.map(|m| m.saturating_mul(2))
            }
            _ => None,
        };
        for seq_len in [None, long] {
            if let Err(Error::NonFinite { detail, .. }) = self.init(seq_len) {
                return Err(Error::NonFinite {
                    what: format!("{what}: RoPE scaling ({})", self.scaling.name()),
                    detail,
                });
            }
        }
        Ok(())
    }

    /// Reads the RoPE settings of a whole Hugging Face config.json, in either style:
    /// transformers 4.x (`rope_theta` + `rope_scaling`) or 5.x (`rope_parameters`, which
    /// carries `rope_theta` itself). The rotated dimension is `head_dim` (or
    /// `hidden_size / num_attention_heads`), or `qk_rope_head_dim` for MLA models.
    ///
    /// Top-level fields merge as transformers' `standardize_rope_params` merges them:
    /// `rope_theta` and `partial_rotary_factor` only fill gaps in the parameters object,
    /// while a top-level `original_max_position_embeddings` (Phi-3 keeps it there)
    /// overrides the object's own for llama3, YaRN and LongRoPE.
    pub fn from_model_config(config: &Value, what: &str) -> Result<Self> {
        let f = Fields::new(what, config);
        let head_dim = match f.opt_whole("qk_rope_head_dim")? {
            Some(d) => d,
            None => match f.opt_whole("head_dim")? {
                Some(d) => d,
                None => {
                    let hidden = f
                        .opt_whole("hidden_size")?
                        .ok_or_else(|| f.error("hidden_size", "missing"))?;
                    let heads = f
                        .opt_whole("num_attention_heads")?
                        .ok_or_else(|| f.error("num_attention_heads", "missing"))?;
                    hidden / heads
                }
            },
        };
        // As in transformers' `rope_scaling or rope_parameters`: a non-empty legacy object wins.
        let non_empty = |key: &str| {
            f.get(key)
                .filter(|v| v.as_object().is_none_or(|o| !o.is_empty()))
        };
        let (key, params) = match non_empty("rope_scaling") {
            Some(p) => ("rope_scaling", Some(p)),
            None => ("rope_parameters", non_empty("rope_parameters")),
        };
        let mut merged = match params {
            None => serde_json::Map::new(),
            Some(Value::Object(o)) => o.clone(),
            Some(v) => {
                return Err(Error::field(
                    what,
                    key,
                    format!("expected an object, got {v}"),
                ));
            }
        };
        // No RoPE parameter is itself an object: this is a per-layer-type table (Gemma 3 style).
        if let Some((layer, _)) = merged.iter().find(|(_, v)| v.is_object()) {
            return Err(Error::field(
                what,
                key,
                format!("per-layer-type RoPE parameters ({layer:?}) are not supported"),
            ));
        }
        for field in ["rope_theta", "partial_rotary_factor"] {
            if let Some(v) = f.get(field) {
                merged.entry(field).or_insert_with(|| v.clone());
            }
        }
        let kind = merged
            .get("rope_type")
            .or_else(|| merged.get("type"))
            .and_then(Value::as_str);
        if matches!(kind, Some("llama3" | "yarn" | "longrope" | "su"))
            && let Some(v) = f.get("original_max_position_embeddings")
        {
            merged.insert("original_max_position_embeddings".into(), v.clone());
        }
        // transformers' `default_theta` when neither place gives a base: 10⁴, except the
        // families whose config class overrides it (of those this crate reads, Mixtral).
        let default_theta = match f.get("model_type").and_then(Value::as_str) {
            Some("mixtral") => 1e6,
            _ => 10_000.0,
        };
        let theta = f.opt_f64("rope_theta")?.unwrap_or(default_theta);
        let max_pos = f.opt_whole("max_position_embeddings")?;
        RopeConfig::new(head_dim, theta, Some(&Value::Object(merged)), max_pos, what)
    }
}

impl RopeConfig {
    /// Number of rotated dimensions: `int(head_dim · partial_rotary_factor)`.
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim as f64 * self.partial_rotary_factor) as usize
    }

    // ANCHOR: init
    /// `inv_freq` and `attention_factor` for a sequence of `seq_len` tokens (only dynamic
    /// NTK and LongRoPE depend on it; `None` means initialisation time).
    pub fn init(&self, seq_len: Option<usize>) -> Result<RopeInit> {
        let dim = self.rotary_dim();
        let base_freqs = default_inv_freq(dim, self.theta);
        let (inv_freq, attention_factor) = match &self.scaling {
            RopeScaling::Default => (base_freqs, 1.0),
            RopeScaling::Linear { factor } => {
                (base_freqs.iter().map(|f| f / factor).collect(), 1.0)
            }
            RopeScaling::Dynamic { factor } => {
                let max_pos = self.max_position_embeddings.unwrap_or(1) as f64;
                let seq = seq_len.map_or(max_pos, |s| (s as f64).max(max_pos));
                let base = ntk_dynamic_base(self.theta, *factor, seq / max_pos, dim);
                (default_inv_freq(dim, base), 1.0)
            }
            RopeScaling::Yarn(y) => (
                yarn_inv_freq(&base_freqs, y, self.theta, dim),
                yarn_attention_factor(y),
            ),
            RopeScaling::Llama3(l) => (llama3_inv_freq(&base_freqs, l), 1.0),
            // ANCHOR_END: init
            RopeScaling::LongRope(l) => {
                let (key, ext) = match seq_len {
                    Some(s) if s > l.original_max_position_embeddings => {
                        ("long_factor", &l.long_factor)
                    }
                    _ => ("short_factor", &l.short_factor),
                };
                if ext.len() != dim / 2 {
                    return Err(Error::field(
                        "longrope",
                        key,
                        format!("{} factors given for {} rotary planes", ext.len(), dim / 2),
                    ));
                }
                let attention_factor = l.attention_factor.unwrap_or(if l.factor <= 1.0 {
                    1.0
                } else {
                    (1.0 + l.factor.ln() / (l.original_max_position_embeddings as f64).ln()).sqrt()
                });
                (
                    base_freqs.iter().zip(ext).map(|(f, e)| f / e).collect(),
                    attention_factor,
                )
            }
            RopeScaling::Proportional { factor } => {
                // The exponents run over the whole head (2i/head_dim), not the rotated part.
                let rotating = (self.partial_rotary_factor * self.head_dim as f64) as usize / 2;
                let freqs = default_inv_freq(self.head_dim, self.theta)
                    .into_iter()
                    .enumerate()
                    .map(|(i, f)| if i < rotating { f / factor } else { 0.0 })
                    .collect();
                (freqs, 1.0)
            }
        };
        check_init(
            &inv_freq,
            attention_factor,
            seq_len.or(self.max_position_embeddings),
        )?;
        Ok(RopeInit {
            inv_freq,
            attention_factor,
        })
    }
}

/// The frequencies must be finite and ≥ 0 and the attention factor finite and > 0, each
/// as the f32 the model rounds it to, and `positions · θ_i` must stay finite in f32 (the
/// model's RoPE table forms the angle that way): otherwise the table holds NaN. A nonzero
/// frequency that rounds to 0 (a factor of 1e300) is refused too: the plane would silently
/// stop rotating.
fn check_init(inv_freq: &[f64], attention_factor: f64, positions: Option<usize>) -> Result<()> {
    let bad = |detail: String| {
        Err(Error::NonFinite {
            what: "RoPE".into(),
            detail,
        })
    };
    let a = attention_factor as f32;
    if !(a.is_finite() && a > 0.0) {
        return bad(format!(
            "attention_factor = {attention_factor:e} (must be a positive, finite f32)"
        ));
    }
    let m = positions.unwrap_or(1).max(1) as f32;
    for (i, &f) in inv_freq.iter().enumerate() {
        let f32_value = f as f32;
        if !(f32_value.is_finite() && f32_value >= 0.0 && (m * f32_value).is_finite()) {
            return bad(format!(
                "inv_freq[{i}] = {f:e} (must be finite and ≥ 0, and {m} positions × it a finite f32)"
            ));
        }
        if f > 0.0 && f32_value == 0.0 {
            return bad(format!(
                "inv_freq[{i}] = {f:e} rounds to 0 in f32 (the plane would not rotate at all)"
            ));
        }
    }
    Ok(())
}

/// An optional number that must be positive when given.
fn opt_positive(f: &Fields, field: &str) -> Result<Option<f64>> {
    match f.get(field) {
        None => Ok(None),
        Some(_) => f.req_positive_f64(field).map(Some),
    }
}

impl RopeScaling {
    /// The `rope_type` this is.
    pub fn name(&self) -> &'static str {
        match self {
            RopeScaling::Default => "default",
            RopeScaling::Linear { .. } => "linear",
            RopeScaling::Dynamic { .. } => "dynamic",
            RopeScaling::Yarn(_) => "yarn",
            RopeScaling::Llama3(_) => "llama3",
            RopeScaling::LongRope(_) => "longrope",
            RopeScaling::Proportional { .. } => "proportional",
        }
    }
}

// ANCHOR: ntk
/// The NTK-aware base for a length ratio `s`: `base · s^{d/(d−2)}` (the text's formula).
pub fn ntk_base(base: f64, s: f64, dim: usize) -> f64 {
    base * s.powf(dim as f64 / (dim as f64 - 2.0))
}

/// Dynamic NTK's base at `ratio = seq_len / max_position_embeddings ≥ 1`:
/// `base · (factor·ratio − (factor − 1))^{d/(d−2)}`, which is the plain base at the trained
/// length and grows with the sequence.
pub fn ntk_dynamic_base(base: f64, factor: f64, ratio: f64, dim: usize) -> f64 {
    ntk_base(base, factor * ratio - (factor - 1.0), dim)
}
// ANCHOR_END: ntk

// ANCHOR: yarn_attention
/// YaRN's temperature: `0.1·mscale·ln s + 1` (1 for `s ≤ 1`).
pub fn yarn_get_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

/// The attention factor: given, or the ratio of the two mscales (DeepSeek), or
/// `get_mscale(s)`.
pub fn yarn_attention_factor(y: &Yarn) -> f64 {
    if let Some(a) = y.attention_factor {
        return a;
    }
    match (y.mscale, y.mscale_all_dim) {
        (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
            yarn_get_mscale(y.factor, m) / yarn_get_mscale(y.factor, all)
        }
        _ => yarn_get_mscale(y.factor, 1.0),
    }
}
// ANCHOR_END: yarn_attention

// ANCHOR: yarn
/// The (fractional) plane index at which a plane turns `rotations` times over
/// `context` tokens: solve `context·θ_i = 2π·rotations` for `i`.
pub fn yarn_correction_dim(rotations: f64, dim: usize, base: f64, context: usize) -> f64 {
    dim as f64 * (context as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
        / (2.0 * base.ln())
}

/// The ramp between the bands: per plane, 0 where the plane keeps its original speed
/// (turns > beta_fast times), 1 where it is fully interpolated (< beta_slow), linear
/// between. This is `1 − inv_freq_extrapolation_factor` in transformers.
pub fn yarn_ramp(y: &Yarn, base: f64, dim: usize) -> Vec<f64> {
    let ctx = y.original_max_position_embeddings;
    let mut low = yarn_correction_dim(y.beta_fast, dim, base, ctx);
    let mut high = yarn_correction_dim(y.beta_slow, dim, base, ctx);
    if y.truncate {
        low = low.floor();
        high = high.ceil();
    }
    let low = low.max(0.0);
    let mut high = high.min(dim as f64 - 1.0);
    if low == high {
        high += 0.001;
    }
    (0..dim / 2)
        .map(|i| ((i as f64 - low) / (high - low)).clamp(0.0, 1.0))
        .collect()
}

/// YaRN's frequencies: `θ_i·(1 − r_i) + (θ_i/s)·r_i` with the ramp `r`.
fn yarn_inv_freq(base_freqs: &[f64], y: &Yarn, base: f64, dim: usize) -> Vec<f64> {
    base_freqs
        .iter()
        .zip(yarn_ramp(y, base, dim))
        .map(|(f, r)| f / y.factor * r + f * (1.0 - r))
        .collect()
}
// ANCHOR_END: yarn

// ANCHOR: llama3
/// llama3: planes with wavelength above `L/low_freq_factor` are divided by the factor,
/// below `L/high_freq_factor` kept, and smoothly blended between.
fn llama3_inv_freq(base_freqs: &[f64], l: &Llama3) -> Vec<f64> {
    let old = l.original_max_position_embeddings as f64;
    let (low_wl, high_wl) = (old / l.low_freq_factor, old / l.high_freq_factor);
    base_freqs
        .iter()
        .map(|&f| {
            let wl = wavelength(f);
            let scaled = if wl > low_wl { f / l.factor } else { f };
            if wl < high_wl || wl > low_wl {
                scaled
            } else {
                let smooth =
                    (old / wl - l.low_freq_factor) / (l.high_freq_factor - l.low_freq_factor);
                (1.0 - smooth) * scaled / l.factor + smooth * scaled
            }
        })
        .collect()
}
// ANCHOR_END: llama3

/// Per plane, the largest angle seen in training (`(L_train − 1)·θ_i`, or a full turn
/// when the plane wrapped around) against the largest needed at `L_infer`.
#[derive(Clone, Debug, PartialEq)]
pub struct PlaneRange {
    pub plane: usize,
    pub theta: f64,
    pub seen: f64,
    pub needed: f64,
}

impl PlaneRange {
    /// True when the inference length asks for angles the plane never reached in training.
    pub fn out_of_distribution(&self) -> bool {
        self.needed > self.seen
    }
}

// ANCHOR: ood
/// The angle ranges each plane covers in training and at inference (source 5.2.1). A
/// plane whose wavelength is shorter than `L_train` has already swept every angle; the
/// slow planes have not, and direct extrapolation feeds them angles never seen.
pub fn ood_planes(inv_freq: &[f64], train_len: usize, infer_len: usize) -> Vec<PlaneRange> {
    let full_turn = 2.0 * std::f64::consts::PI;
    inv_freq
        .iter()
        .enumerate()
        .map(|(plane, &theta)| PlaneRange {
            plane,
            theta,
            seen: ((train_len - 1) as f64 * theta).min(full_turn),
            needed: ((infer_len - 1) as f64 * theta).min(full_turn),
        })
        .collect()
}
// ANCHOR_END: ood
