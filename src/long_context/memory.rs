//! Memory of long context (source S1 §2): the full attention matrix grows as n², the KV
//! cache as n.
//!
//! Claim backed: `ext.attention_matrix_memory`.

// ANCHOR: memory
/// Entries of one `[n, n]` attention score matrix (one head, one layer).
pub fn attention_matrix_entries(n: u64) -> u64 {
    n * n
}

/// Bytes of one `[n, n]` attention matrix at `bytes_per_entry` (2 for FP16/BF16).
pub fn attention_matrix_bytes(n: u64, bytes_per_entry: u64) -> u64 {
    attention_matrix_entries(n) * bytes_per_entry
}

/// Bytes of the KV cache per token: keys and values for every layer and KV head.
pub fn kv_cache_bytes_per_token(
    layers: u64,
    kv_heads: u64,
    head_dim: u64,
    bytes_per_value: u64,
) -> u64 {
    2 * layers * kv_heads * head_dim * bytes_per_value
}
// ANCHOR_END: memory

/// Bytes of the KV cache for `tokens` tokens (batch 1).
pub fn kv_cache_bytes(
    tokens: u64,
    layers: u64,
    kv_heads: u64,
    head_dim: u64,
    bytes_per_value: u64,
) -> u64 {
    tokens * kv_cache_bytes_per_token(layers, kv_heads, head_dim, bytes_per_value)
}

/// Bytes expressed in decimal gigabytes (10⁹) and binary gibibytes (2³⁰).
pub fn gb_and_gib(bytes: u64) -> (f64, f64) {
    (bytes as f64 / 1e9, bytes as f64 / (1u64 << 30) as f64)
}
