//! Pins every `quant.*` claim (chapter 11): status and value, the expected sizes derived
//! here by hand from Qwen3-30B-A3B's shapes and ggml's block sizes, not from the crate's
//! tensor list.

use llm_anatomy::claims::{self, Status};

fn claim(id: &str) -> claims::Claim {
    claims::find(id).unwrap_or_else(|| panic!("claim {id} missing from the registry"))
}

fn value(id: &str) -> f64 {
    claim(id)
        .value
        .unwrap_or_else(|| panic!("claim {id} has no value"))
}

const GIB: f64 = (1u64 << 30) as f64;
// Qwen3-30B-A3B (its config.json).
const V: u64 = 151_936;
const H: u64 = 2048;
const L: u64 = 48;
const E: u64 = 128;
const I: u64 = 768;
const ATTN_Q: u64 = 4096 * H;
const ATTN_KV: u64 = 512 * H;
const EXPERT_MATRIX: u64 = E * I * H;
/// f32 per layer: two RMSNorms, q_norm and k_norm, the router.
const F32_LAYER: u64 = 2 * H + 2 * 128 + E * H;
const PARAMS: u64 = 2 * V * H + H + L * (2 * ATTN_Q + 2 * ATTN_KV + 3 * EXPERT_MATRIX + F32_LAYER);

/// Bytes of `n` weights at `block_bytes` per `block` weights.
fn at(n: u64, block_bytes: u64, block: u64) -> u64 {
    n / block * block_bytes
}

/// Tensor bytes of Q4_K_M by hand: Q4_K (144 B / 256) everywhere, Q6_K (210 B / 256) for
/// the head and for attn_v and ffn_down_exps in 24 layers, f32 norms and routers.
fn q4_k_m_tensor_bytes() -> u64 {
    let q4 = |n| at(n, 144, 256);
    let q6 = |n| at(n, 210, 256);
    let more = 6 + 6 + 12; // layers 0–5, 42–47 and 8, 11, …, 41
    let layer_common = 2 * q4(ATTN_Q) + q4(ATTN_KV) + 2 * q4(EXPERT_MATRIX) + 4 * F32_LAYER;
    q4(V * H)
        + q6(V * H)
        + 4 * H
        + L * layer_common
        + more * (q6(ATTN_KV) + q6(EXPERT_MATRIX))
        + (L - more) * (q4(ATTN_KV) + q4(EXPERT_MATRIX))
}

#[test]
fn quant_block_bits() {
    assert_eq!(claim("quant.block_bits").status, Status::Reproduced);
    // Q4_K: d and dmin (f16 each), 12 bytes of 6-bit scales and minima, 128 of nibbles.
    assert_eq!(
        value("quant.block_bits"),
        (2.0 + 2.0 + 12.0 + 128.0) * 8.0 / 256.0
    );
}

#[test]
fn quant_q4_k_m_size() {
    assert_eq!(claim("quant.q4_k_m_size").status, Status::Reproduced);
    let v = value("quant.q4_k_m_size");
    let tensors = q4_k_m_tensor_bytes() as f64 / GIB;
    // The file adds a header and the tokenizer's metadata: a few MB, < 0.01 GiB.
    assert!(v > tensors && v < tensors + 0.01, "{v} vs {tensors}");
    assert_eq!((v * 10.0).round(), 173.0);
}

#[test]
fn quant_q4_k_m_bpw() {
    // Computed 4.86; the published 4.88 does not follow from the same mix.
    assert_eq!(claim("quant.q4_k_m_bpw").status, Status::Erratum);
    let want = 8.0 * q4_k_m_tensor_bytes() as f64 / PARAMS as f64;
    let v = value("quant.q4_k_m_bpw");
    assert!((v - want).abs() < 1e-12, "{v} vs {want}");
    assert_eq!((v * 100.0).round(), 486.0);
}

#[test]
fn quant_q8_0_size() {
    assert_eq!(claim("quant.q8_0_size").status, Status::Reproduced);
    let tensors = at(PARAMS - L * F32_LAYER - H, 34, 32) + 4 * (L * F32_LAYER + H);
    let v = value("quant.q8_0_size");
    let gb = tensors as f64 / 1e9;
    assert!(v > gb && v < gb + 0.01, "{v} vs {gb}");
    assert_eq!((v * 10.0).round(), 325.0);
}

#[test]
fn quant_bf16_size() {
    assert_eq!(claim("quant.bf16_size").status, Status::Reproduced);
    let tensors = 2 * (PARAMS - L * F32_LAYER - H) + 4 * (L * F32_LAYER + H);
    let v = value("quant.bf16_size");
    let gb = tensors as f64 / 1e9;
    assert!(v > gb && v < gb + 0.01, "{v} vs {gb}");
    assert_eq!(v.round(), 61.0);
}

#[test]
fn quant_fits_24gb() {
    assert_eq!(claim("quant.fits_24gb").status, Status::Reproduced);
    // f16 K and V: 48 layers × 2 × 4 heads × 128 × 2 bytes × 40,960 tokens = 3.75 GiB.
    let kv = L * 2 * 4 * 128 * 2 * 40_960;
    assert_eq!(kv, 15 << 28);
    let want = (q4_k_m_tensor_bytes() + kv) as f64 / GIB;
    let v = value("quant.fits_24gb");
    assert!((v - want).abs() < 1e-9 && v < 24.0, "{v} vs {want}");
}

#[test]
fn quant_decode_bound() {
    assert_eq!(claim("quant.decode_bound").status, Status::Reproduced);
    // Per token at Q4_K_M: one Q4_K embedding row, the Q6_K head, attention whole, the
    // router (f32), 8 of 128 experts' share of each stacked tensor, the norms.
    let q4 = |n| at(n, 144, 256);
    let q6 = |n| at(n, 210, 256);
    let more = 24;
    let experts = |bytes: u64| bytes / E * 8;
    let read = q4(V * H) / V
        + q6(V * H)
        + 4 * H
        + L * (2 * q4(ATTN_Q) + q4(ATTN_KV) + 4 * F32_LAYER + 2 * experts(q4(EXPERT_MATRIX)))
        + more * (q6(ATTN_KV) + experts(q6(EXPERT_MATRIX)))
        + (L - more) * (q4(ATTN_KV) + experts(q4(EXPERT_MATRIX)));
    let want = 1008e9 / read as f64;
    let v = value("quant.decode_bound");
    assert!((v - want).abs() < 1e-9 * want, "{v} vs {want}");
    assert_eq!(v.round(), 525.0);
}

#[test]
fn quant_mix_layers() {
    assert_eq!(claim("quant.mix_layers").status, Status::Reproduced);
    assert_eq!(value("quant.mix_layers"), 24.0);
}

#[test]
fn quant_rmse() {
    use llm_anatomy::params::quant_error::{Weights, weights};
    use llm_anatomy::quant::{GgmlType, dequantize, quantize};
    assert_eq!(claim("quant.rmse").status, Status::Reproduced);
    // The value is Q4_K on the seeded Gaussian row, recomputed here from the quantiser.
    let x = weights(Weights::Gaussian, 11);
    let mut bytes = Vec::new();
    quantize(GgmlType::Q4_K, &x, &mut bytes);
    assert_eq!(bytes.len(), x.len() / 256 * 144);
    let mut y = vec![0f32; x.len()];
    dequantize(GgmlType::Q4_K, &bytes, &mut y);
    let (mut e, mut s) = (0f64, 0f64);
    for (a, b) in x.iter().zip(&y) {
        e += (f64::from(*a) - f64::from(*b)).powi(2);
        s += f64::from(*a).powi(2);
    }
    let want = (e / s).sqrt();
    assert!((value("quant.rmse") - want).abs() < 1e-12);
    // 4 bits with a scale and minimum per 32 weights: the grid step is about a fifteenth of
    // a block's range (≈ 5σ), and a uniform rounding error is step/√12: ≈ 0.1σ at most.
    assert!(want > 0.03 && want < 0.11, "{want}");
}
