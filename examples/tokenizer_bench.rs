//! Encoding speed of our tokenizer on a text file (run by scripts/bench-tokenizer.py,
//! which times tiktoken on the same file in the same run).
//!
//! `cargo run --release --example tokenizer_bench -- CORPUS [REPEATS]`
//! Prints one JSON object: bytes, ids, a hash of the ids (to check they equal tiktoken's),
//! the best-of-REPEATS MB/s single-threaded (`encode`) and with rayon's threads
//! (`encode_parallel`, RAYON_NUM_THREADS sets the count).

use llm_anatomy::tokenizer::Tokenizer;
use std::time::Instant;

/// Order-dependent hash of an id sequence; scripts/bench-tokenizer.py computes the same.
fn hash(ids: &[u32]) -> u64 {
    ids.iter().fold(1469598103934665603u64, |h, &id| {
        (h ^ id as u64).wrapping_mul(1099511628211)
    })
}

fn best_mb_s(bytes: usize, repeats: usize, mut f: impl FnMut() -> Vec<u32>) -> (f64, Vec<u32>) {
    let mut best = f64::INFINITY;
    let mut ids = Vec::new();
    for _ in 0..repeats {
        let t = Instant::now();
        ids = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (bytes as f64 / 1e6 / best, ids)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or_else(|| anyhow::anyhow!("usage: tokenizer_bench CORPUS [REPEATS]"))?;
    let repeats: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(3);
    let text = std::fs::read_to_string(path)?;
    let tok = Tokenizer::qwen()?;
    let (single, ids) = best_mb_s(text.len(), repeats, || tok.encode(&text).expect("encode"));
    let (parallel, par_ids) = best_mb_s(text.len(), repeats, || {
        tok.encode_parallel(&text).expect("encode")
    });
    // The regex alone (pieces counted, no BPE), to show where the time goes.
    let (regex_only, _) = best_mb_s(text.len(), repeats, || {
        vec![tok.pieces(&text).expect("pieces").len() as u32]
    });
    anyhow::ensure!(ids == par_ids, "parallel ids differ from sequential ids");
    let out = serde_json::json!({
        "bytes": text.len(),
        "ids": ids.len(),
        "hash": hash(&ids).to_string(),
        "single_thread_mb_s": single,
        "parallel_mb_s": parallel,
        "pretokenize_only_mb_s": regex_only,
        "threads": rayon::current_num_threads(),
    });
    println!("{out}");
    Ok(())
}
