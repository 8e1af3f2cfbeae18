//! Claims of chapter 11: quantisation, fitting a 30B MoE into 24 GB (S0 5.5, S1 §3 and
//! its troubleshooting row "MoE 模型推理显存爆了"; the published GGUF sizes of
//! Qwen3-30B-A3B). Every size is computed by [`crate::params::quant`] with llama.cpp's
//! per-tensor type choice ([`crate::quant::mix`]).

use super::{Entry, Outcome, outcome};
use crate::params::quant::{self as pq, QuantEstimate};
use crate::params::{self, group};
use crate::quant::GgmlType;
use crate::quant::mix::{FileType, use_more_bits};

const GIB: f64 = (1u64 << 30) as f64;

/// The context Qwen3-30B-A3B's config declares (`max_position_embeddings`).
pub fn a3b_context() -> u64 {
    let (_, text) = params::BUNDLED
        .iter()
        .find(|(n, _)| *n == "qwen3-30b-a3b")
        .expect("bundled config");
    let v: serde_json::Value = serde_json::from_str(text).expect("bundled config is JSON");
    v["max_position_embeddings"]
        .as_u64()
        .expect("max_position_embeddings")
}

/// Qwen3-30B-A3B under a llama.cpp file type, KV cache at the config's context.
pub fn a3b(scheme: FileType) -> QuantEstimate {
    let c = params::bundled("qwen3-30b-a3b").expect("bundled config");
    pq::estimate(&c, scheme, a3b_context())
}

/// `x` rounds to `stated` at `decimals` places.
fn rounds_to(x: f64, stated: f64, decimals: i32) -> bool {
    let p = 10f64.powi(decimals);
    (x * p).round() == (stated * p).round()
}

fn quant_q4_k_m_size() -> Outcome {
    let e = a3b(FileType::Q4_K_M);
    outcome(
        e.file_gib,
        format!(
            "{} GiB = {:.2} GB ({} bytes of tensors + ≈ {:.1} MB of header and metadata)",
            format_args!("{:.2}", e.file_gib),
            e.file_gb,
            group(e.tensor_bytes),
            (e.file_bytes - e.tensor_bytes) as f64 / 1e6
        ),
        rounds_to(e.file_gib, 17.3, 1),
        "llama.cpp's Q4_K_M mix on every tensor of the config: Q4_K for most matrices, Q6_K for the output head and for attn_v and ffn_down_exps in half the layers, f32 norms and routers.",
    )
}

fn quant_q4_k_m_bpw() -> Outcome {
    let e = a3b(FileType::Q4_K_M);
    let whole_file = 8.0 * e.file_bytes as f64 / e.parameters as f64;
    outcome(
        e.bits_per_weight,
        format!(
            "{:.3} bits per weight in the tensors ({:.3} counting the whole file)",
            e.bits_per_weight, whole_file
        ),
        rounds_to(e.bits_per_weight, 4.88, 2),
        format!(
            "The same mix that reproduces 17.3 GiB averages {:.2} bits per weight (llama-quantize's BPW: tensor bytes × 8 / parameters); 4.88 would need {:.0} MB more tensor data, a {:.2} GiB file.",
            e.bits_per_weight,
            (4.88 * e.parameters as f64 / 8.0 - e.tensor_bytes as f64) / 1e6,
            (4.88 * e.parameters as f64 / 8.0 + (e.file_bytes - e.tensor_bytes) as f64) / GIB
        ),
    )
}

fn quant_q8_0_size() -> Outcome {
    let e = a3b(FileType::Q8_0);
    outcome(
        e.file_gb,
        format!(
            "{:.2} GB = {:.2} GiB ({:.3} bits per weight)",
            e.file_gb, e.file_gib, e.bits_per_weight
        ),
        // The stated size is a published file's; this arithmetic models its tensor mix, not
        // its exact metadata, so it can confirm the size to a fraction of a percent, not refute it.
        (e.file_gb / 32.6 - 1.0).abs() <= 0.005,
        format!(
            "Q8_0 is 34 bytes per 32 weights (8.5 bits); with f32 norms and routers and ≈ {:.0} MB of metadata the arithmetic gives {:.2} GB ({:.2} GiB), {:.1}% from the published file's 32.6 GB; what the remaining {:.2} GB holds is not known without the file.",
            (e.file_bytes - e.tensor_bytes) as f64 / 1e6,
            e.file_gb,
            e.file_gib,
            100.0 * (e.file_gb / 32.6 - 1.0).abs(),
            (32.6 - e.file_gb).abs()
        ),
    )
}

fn quant_bf16_size() -> Outcome {
    let e = a3b(FileType::BF16);
    outcome(
        e.file_gb,
        format!(
            "{:.2} GB = {:.2} GiB ({} parameters × 2 bytes, norms and routers f32)",
            e.file_gb,
            e.file_gib,
            group(e.parameters)
        ),
        rounds_to(e.file_gb, 61.0, 0),
        format!(
            "{:.1}B parameters at 2 bytes each: {:.0} GB, which is {:.1} GiB.",
            e.parameters as f64 / 1e9,
            e.file_gb,
            e.file_gib
        ),
    )
}

fn quant_fits_24gb() -> Outcome {
    let q4 = a3b(FileType::Q4_K_M);
    let bf16 = a3b(FileType::BF16);
    let c = params::bundled("qwen3-30b-a3b").expect("bundled config");
    let r = params::count(&c);
    let active_estimate = r.active as f64 * q4.bits_per_weight / 8.0;
    let fits = q4.memory_bytes as f64 <= 24.0 * GIB;
    outcome(
        q4.memory_gib,
        format!(
            "Q4_K_M: {:.2} GiB weights + {:.2} GiB KV cache at {} tokens = {:.2} GiB ≤ 24 GiB: {fits}; bf16: {:.2} GiB; an estimate from the {} active parameters would say {:.2} GiB",
            q4.tensor_bytes as f64 / GIB,
            q4.kv_cache_bytes as f64 / GIB,
            group(q4.context),
            q4.memory_gib,
            bf16.memory_gib,
            group(r.active),
            active_estimate / GIB
        ),
        fits && bf16.memory_bytes as f64 > 24.0 * GIB,
        format!(
            "Reproduced: memory goes by the total count (every expert resident); at Q4_K_M the model and a full {}-token f16 cache fit in 24 GiB, bf16 needs {:.1}× as much, and an estimate from the active parameters is {:.0}× too small (S1's troubleshooting row).",
            group(q4.context),
            bf16.memory_bytes as f64 / q4.memory_bytes as f64,
            q4.tensor_bytes as f64 / active_estimate
        ),
    )
}

/// A 24 GB card's memory bandwidth (NVIDIA's RTX 4090 specification, 1008 GB/s), the
/// machine the chapter's title has in mind.
pub const BANDWIDTH_24GB_CARD: f64 = 1008e9;

fn quant_decode_bound() -> Outcome {
    let e = a3b(FileType::Q4_K_M);
    let c = params::bundled("qwen3-30b-a3b").expect("bundled config");
    let r = params::count(&c);
    let simple = r.active as f64 * e.bits_per_weight / 8.0;
    let exact = e.bytes_read_per_token as f64;
    let bound = BANDWIDTH_24GB_CARD / exact;
    outcome(
        bound,
        format!(
            "{} active × {:.3} bits / 8 = {:.2} GB per token; per tensor (8 of 128 experts, one embedding row, the Q6_K head whole) {:.2} GB → ≤ {:.0} tokens/s at 1008 GB/s (dense bf16 32B: {:.0})",
            group(r.active),
            e.bits_per_weight,
            simple / 1e9,
            exact / 1e9,
            bound,
            BANDWIDTH_24GB_CARD
                / (2.0
                    * params::count(&params::bundled("qwen3-32b").expect("bundled")).active as f64)
        ),
        exact < simple && bound > 100.0,
        format!(
            "Decode reads every active weight once per token, so bandwidth / bytes read bounds tokens/s; the per-tensor reads are below active × bpw / 8 because the input embedding is one row, not {:.0}M parameters.",
            r.embed_tokens as f64 / 1e6
        ),
    )
}

fn quant_block_bits() -> Outcome {
    let types = [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];
    let shown: Vec<String> = types
        .iter()
        .map(|t| {
            format!(
                "{} {} B / {} = {}",
                t.name(),
                t.block_bytes(),
                t.block_size(),
                t.bits_per_weight()
            )
        })
        .collect();
    let bits: Vec<f64> = types.iter().map(|t| t.bits_per_weight()).collect();
    outcome(
        GgmlType::Q4_K.bits_per_weight(),
        shown.join("; "),
        bits == [8.5, 4.5, 4.5, 5.5, 6.5625],
        "A block's scales are part of its bits: 4-bit weights cost 4.5 bits in Q4_0 (one f16 scale per 32) and in Q4_K (two f16 per 256 plus 6-bit scales and minima per 32).",
    )
}

fn quant_mix_layers() -> Outcome {
    let c = params::bundled("qwen3-30b-a3b").expect("bundled config");
    let n = c.num_hidden_layers as usize;
    let more: Vec<usize> = (0..n).filter(|&l| use_more_bits(l, n)).collect();
    let tensors = pq::plan(&c, FileType::Q4_K_M);
    let q6: Vec<&str> = tensors
        .iter()
        .filter(|t| t.ty == GgmlType::Q6_K)
        .map(|t| t.name.as_str())
        .collect();
    let q6_params: u64 = tensors
        .iter()
        .filter(|t| t.ty == GgmlType::Q6_K)
        .map(|t| t.numel())
        .sum();
    let total: u64 = tensors.iter().map(|t| t.numel()).sum();
    let ok = more.len() == 24 && q6.contains(&"output.weight") && q6.len() == 1 + 2 * more.len();
    outcome(
        more.len() as f64,
        format!(
            "{} of {n} layers get Q6_K for attn_v and ffn_down_exps (layers {:?}), plus output.weight: {} tensors, {:.1}% of the parameters",
            more.len(),
            more,
            q6.len(),
            100.0 * q6_params as f64 / total as f64
        ),
        ok,
        "llama.cpp's Q4_K_M rule: the first and last eighth of the layers and every third in between get more bits where the error costs most (values and the FFN's output).",
    )
}

fn quant_rmse() -> Outcome {
    use crate::params::quant_error::{STUDENT_NU, error_table};
    let table = error_table();
    let get = |ty: GgmlType| {
        *table
            .iter()
            .find(|p| p.ty == ty)
            .expect("type in the table")
    };
    let shown: Vec<String> = table
        .iter()
        .map(|p| format!("{} {:.4} / {:.4}", p.ty.name(), p.gaussian, p.student_t))
        .collect();
    // More bits, less error, within each family of blocks; K types beat the legacy type of
    // the same bits; heavy tails cost every quantised type.
    let (q4_0, q4_k, q5_0, q5_k, q6_k, q8_0) = (
        get(GgmlType::Q4_0),
        get(GgmlType::Q4_K),
        get(GgmlType::Q5_0),
        get(GgmlType::Q5_K),
        get(GgmlType::Q6_K),
        get(GgmlType::Q8_0),
    );
    let ok = q4_k.gaussian < q4_0.gaussian
        && q5_k.gaussian < q5_0.gaussian
        && q4_k.gaussian > q5_k.gaussian
        && q5_k.gaussian > q6_k.gaussian
        && q6_k.gaussian > q8_0.gaussian
        && [q4_0, q4_k, q5_0, q5_k, q6_k, q8_0]
            .iter()
            .all(|p| p.student_t > p.gaussian);
    outcome(
        q4_k.gaussian,
        format!(
            "RMSE/RMS, Gaussian / Student-t (ν = {STUDENT_NU}) rows of 16,384: {}",
            shown.join("; ")
        ),
        ok,
        format!(
            "Each extra bit roughly halves the error; at 4.5 bits Q4_K's per-32 scales and minima give {:.0}% less error than Q4_0 on Gaussian rows ({:.0}% on heavy-tailed ones), and heavy tails raise every quantised type's error because one large weight sets its block's scale.",
            100.0 * (1.0 - q4_k.gaussian / q4_0.gaussian),
            100.0 * (1.0 - q4_k.student_t / q4_0.student_t)
        ),
    )
}

pub const ENTRIES: &[Entry] = &[
    Entry {
        id: "quant.block_bits",
        section: "ggml block formats",
        statement: "bits per weight of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K, scales included",
        stated: "8.5, 4.5, 4.5, 5.5, 6.5625",
        compute: quant_block_bits,
    },
    Entry {
        id: "quant.rmse",
        section: "ggml block formats",
        statement: "reconstruction error (RMSE relative to the weights' RMS) of each block type on Gaussian and heavy-tailed rows: fewer bits, more error; K types better at equal bits",
        stated: "qualitative → numbers",
        compute: quant_rmse,
    },
    Entry {
        id: "quant.q4_k_m_size",
        section: "Qwen3-30B-A3B-GGUF",
        statement: "Qwen3-30B-A3B in Q4_K_M is a 17.3 GiB file",
        stated: "17.3 GiB",
        compute: quant_q4_k_m_size,
    },
    Entry {
        id: "quant.q4_k_m_bpw",
        section: "Qwen3-30B-A3B-GGUF",
        statement: "Qwen3-30B-A3B in Q4_K_M averages 4.88 bits per weight",
        stated: "4.88",
        compute: quant_q4_k_m_bpw,
    },
    Entry {
        id: "quant.q8_0_size",
        section: "Qwen3-30B-A3B-GGUF",
        statement: "Qwen3-30B-A3B in Q8_0 is a 32.6 GB file",
        stated: "32.6 GB",
        compute: quant_q8_0_size,
    },
    Entry {
        id: "quant.bf16_size",
        section: "S0 5.5",
        statement: "Qwen3-30B-A3B's 30.5B parameters in bf16 take 61 GB",
        stated: "61 GB",
        compute: quant_bf16_size,
    },
    Entry {
        id: "quant.fits_24gb",
        section: "S1 §3, troubleshooting",
        statement: "MoE saves compute, not memory (显存不省): size memory by the total parameters; at 4–5 bits Qwen3-30B-A3B with its KV cache fits a 24 GiB machine",
        stated: "total, not active; fits",
        compute: quant_fits_24gb,
    },
    Entry {
        id: "quant.decode_bound",
        section: "S0 5.5, S1 §3",
        statement: "decode reads active parameters × bits per weight / 8 bytes per token; bandwidth / that bounds tokens/s",
        stated: "formula",
        compute: quant_decode_bound,
    },
    Entry {
        id: "quant.mix_layers",
        section: "llama.cpp Q4_K_M",
        statement: "Q4_K_M gives Q6_K to attn_v and ffn_down in the first and last eighth of the layers and every third layer between, and to the output head",
        stated: "rule",
        compute: quant_mix_layers,
    },
];
