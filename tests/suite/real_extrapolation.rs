//! Chapter 3 on a real model: the chunked per-token loss of `anatomy perplexity`, the
//! inference-time scalings it applies, and the table and claims judged from
//! data/real/extrapolation-smollm2.json (scripts/gen_real_extrapolation.sh).

use llm_anatomy::claims::real_extrapolation as rx;
use llm_anatomy::long_context::scaling::{RopeScaling, ntk_base};
use llm_anatomy::qwen3::perplexity::{
    CHUNK, Method, buckets, scaled_config, target_loss, token_losses,
};
use llm_anatomy::qwen3::{self, Model};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The losses of a run in chunks that share one KV cache equal those of one prefill of the
/// whole text (two chunks, on the bundled model with YaRN set).
#[test]
fn chunked_losses_equal_one_prefill() {
    let (config, ckpt) = qwen3::open(&root().join("data/anatomy-moe")).unwrap();
    let n = CHUNK + 24;
    let config = scaled_config(config, Method::Yarn, 2.0, n).unwrap();
    let model = Model::new(config, &ckpt).unwrap();
    let ids: Vec<u32> = (0..n).map(|i| ((i * 7919 + 13) % 5000) as u32).collect();
    let losses = token_losses(&model, &ids, |_, _| {}).unwrap();
    assert_eq!(losses.len(), n - 1);
    let out = model.logits(&ids).unwrap();
    let vocab = model.config.vocab_size;
    for (p, &loss) in losses.iter().enumerate() {
        let want = target_loss(&out.logits[p * vocab..(p + 1) * vocab], ids[p + 1] as usize);
        assert!(
            (loss - want).abs() <= 1e-4,
            "position {}: {loss} vs {want}",
            p + 1
        );
    }
}

/// The probabilities behind the loss sum to one over the vocabulary.
#[test]
fn target_loss_is_a_log_softmax() {
    let row: Vec<f32> = (0..1000)
        .map(|i| ((i * 37 % 101) as f32) * 0.3 - 9.0)
        .collect();
    let total: f64 = (0..row.len()).map(|t| (-target_loss(&row, t)).exp()).sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
}

/// Buckets [0, L), [L, 2L), [2L, 4L) over positions 1.. (position 0 has no loss), the last
/// cut at the text's end.
#[test]
fn buckets_split_at_powers_of_two_of_the_trained_length() {
    let losses: Vec<f64> = (1..=10).map(|p| p as f64).collect();
    let b = buckets(&losses, 4);
    let spans: Vec<(usize, usize, usize)> = b.iter().map(|b| (b.start, b.end, b.count)).collect();
    assert_eq!(spans, [(0, 4, 3), (4, 8, 4), (8, 11, 3)]);
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    assert_eq!(b[1].mean, mean(&[4.0, 5.0, 6.0, 7.0]));
    assert!(buckets(&losses, 0).len() > 1, "a zero length must not loop");
}

/// Each method is a config change: NTK raises the base, YaRN and dynamic NTK keep the
/// trained length as their reference, and room is made for the positions asked for.
#[test]
fn scalings_are_config_changes() {
    let (config, _) = qwen3::open(&root().join("data/anatomy-moe")).unwrap();
    let l = config.max_position_embeddings;
    let ntk = scaled_config(config.clone(), Method::Ntk, 4.0, 4 * l).unwrap();
    let dim = config.rope.rotary_dim();
    assert_eq!(ntk.rope.theta, ntk_base(config.rope.theta, 4.0, dim));
    assert_eq!(ntk.max_position_embeddings, 4 * l);
    let yarn = scaled_config(config.clone(), Method::Yarn, 2.0, 2 * l).unwrap();
    match &yarn.rope.scaling {
        RopeScaling::Yarn(y) => assert_eq!(y.original_max_position_embeddings, l),
        other => panic!("{other:?}"),
    }
    let dynamic = scaled_config(config.clone(), Method::Dynamic, 2.0, 2 * l).unwrap();
    assert_eq!(dynamic.rope.max_position_embeddings, Some(l));
    for bad in [0.5, f64::NAN, f64::INFINITY] {
        let e = scaled_config(config.clone(), Method::Linear, bad, l).unwrap_err();
        assert!(e.to_string().contains("--factor"), "{e}");
    }
    assert!(
        Method::parse("rope")
            .unwrap_err()
            .to_string()
            .contains("--rope-scaling")
    );
}

/// Chapter 3 includes book/src/generated/real-extrapolation.md; this recomputes it.
/// `BLESS=1 cargo test --test suite real_extrapolation::` rewrites the file.
#[test]
fn chapter_3_table_is_current() {
    let path = root().join("book/src/generated/real-extrapolation.md");
    let text = rx::table_markdown().unwrap();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(on_disk, text, "{} is stale: run BLESS=1", path.display());
}

/// The real runs give every claim a computed status; a length not measured is needs-data
/// or said in the detail, never an erratum.
#[test]
fn real_claims_are_judged_never_erratum() {
    use llm_anatomy::claims::Status;
    for outcome in [
        rx::real_direct_extrapolation(),
        rx::real_scaling_no_finetune(),
        rx::real_pi_short(),
    ] {
        assert_ne!(outcome.status, Status::Erratum, "{}", outcome.note);
        if outcome.status != Status::NeedsData {
            assert!(
                outcome.value.is_some_and(f64::is_finite),
                "{}",
                outcome.computed
            );
        }
    }
    // PI on a short text is measured in the committed data.
    assert_ne!(rx::real_pi_short().status, Status::NeedsData);
}

/// The chapter's figure draws from the committed runs; `BLESS=1` rewrites
/// figures/real_extrapolation.svg.
#[test]
fn figure_draws_from_the_runs() {
    let svg = llm_anatomy::figures::render_svg("real_extrapolation").unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(root().join("figures/real_extrapolation.svg"), &svg).unwrap();
    }
}

/// Attention is causal, so the first L positions of a 2L run score as the L run does.
#[test]
fn a_longer_run_scores_its_first_positions_as_the_shorter_one() {
    let runs = rx::runs().unwrap();
    let l = runs[0].trained_context;
    let (Some(short), Some(long)) = (
        rx::find(&runs, "none", None, l),
        rx::find(&runs, "none", None, 2 * l),
    ) else {
        return;
    };
    let (a, b) = (short.bucket(0).unwrap(), long.bucket(0).unwrap());
    assert_eq!(a.count, b.count);
    assert!((a.mean - b.mean).abs() < 1e-4, "{} vs {}", a.mean, b.mean);
}
