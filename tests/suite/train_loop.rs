//! Chapter 12's training loop: the same seed gives bitwise-equal losses, a run stopped and
//! resumed equals one that never stopped, checkpoints load back, the loss goes down, and
//! `anatomy train` refuses bad flags with exit code 2.

use crate::common::Scratch;
use llm_anatomy::qwen3::config::Qwen3Config;
use llm_anatomy::train::params::Params;
use llm_anatomy::train::trainer::{
    StepLog, TrainOptions, TrainState, load_checkpoint, read_log, train,
};
use serde_json::json;
use std::process::Command;

fn tiny_config() -> Qwen3Config {
    let v = json!({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": 48, "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": true, "num_local_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 16, "norm_topk_prob": true, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "output_router_logits": true, "router_aux_loss_coef": 0.01,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "initializer_range": 0.02
    });
    Qwen3Config::from_json(&v, "tiny").unwrap()
}

/// A token stream with structure to learn: a repeating pattern with a slow drift.
fn tokens(n: usize, offset: usize) -> Vec<u32> {
    (0..n)
        .map(|i| (((i + offset) * 5 + (i + offset) / 11) % 48) as u32)
        .collect()
}

fn options() -> TrainOptions {
    TrainOptions {
        steps: 8,
        batch_size: 2,
        seq_len: 12,
        warmup_steps: 2,
        eval_every: 3,
        eval_batches: 2,
        checkpoint_every: 0,
        // Small enough that QK-clip acts, and the aux-free bias moves.
        qk_clip_tau: 0.05,
        router_bias_speed: 1e-3,
        adamw_lr: 1e-2,
        muon_lr: 1e-2,
        seed: 7,
        ..TrainOptions::default()
    }
}

/// An empty output directory for run `name`, removed when dropped.
fn scratch(name: &str) -> Scratch {
    crate::common::scratch(&format!("train-loop-{name}"))
}

fn fresh(options: TrainOptions) -> TrainState {
    let params = Params::init(&tiny_config(), options.seed).unwrap();
    TrainState::new(params, options).unwrap()
}

fn losses(logs: &[StepLog]) -> Vec<(u32, Option<u32>)> {
    logs.iter()
        .map(|l| (l.loss.to_bits(), l.heldout_loss.map(f32::to_bits)))
        .collect()
}

#[test]
fn same_seed_same_losses_and_resume_equals_one_run() {
    let (train_tokens, heldout) = (tokens(400, 0), tokens(100, 1000));
    let dir_a = scratch("a");
    let mut a = fresh(options());
    let logs_a = train(&mut a, &train_tokens, &heldout, &dir_a, 8, false).unwrap();
    assert_eq!(logs_a.len(), 8);
    assert!(
        logs_a.iter().any(|l| l.qk_clipped_heads > 0),
        "QK-clip never acted"
    );

    // Same seed, fresh start: bit for bit.
    let dir_b = scratch("b");
    let mut b = fresh(options());
    let logs_b = train(&mut b, &train_tokens, &heldout, &dir_b, 8, false).unwrap();
    assert_eq!(losses(&logs_a), losses(&logs_b));

    // Stop at 4, resume from the checkpoint, go on to 8.
    let dir_c = scratch("c");
    let mut c = fresh(options());
    train(&mut c, &train_tokens, &heldout, &dir_c, 4, false).unwrap();
    drop(c);
    let mut resumed = load_checkpoint(&dir_c).unwrap();
    assert_eq!(resumed.step, 4);
    train(&mut resumed, &train_tokens, &heldout, &dir_c, 8, false).unwrap();
    let logged = read_log(&dir_c.join("train_log.jsonl")).unwrap();
    // The last held-out loss is at the final step either way; earlier ones at every 3rd.
    let pick = |l: &[StepLog]| -> Vec<u32> { l.iter().map(|x| x.loss.to_bits()).collect() };
    assert_eq!(pick(&logged), pick(&logs_a));
    // (The config read back names its dtype, float32; the values are what matter.)
    assert!(
        resumed.params.params == a.params.params,
        "parameters after resume"
    );
    assert!(
        resumed.router_bias == a.router_bias,
        "router bias after resume"
    );
    assert!(
        resumed.optimizer.exp_avg == a.optimizer.exp_avg,
        "moments after resume"
    );
    assert!(resumed.optimizer.exp_avg_sq == a.optimizer.exp_avg_sq);

    // The checkpoint is the model: Params::load gives back what was trained.
    let loaded = Params::load(&dir_a).unwrap();
    assert!(
        loaded.params == a.params.params,
        "Params::load of the checkpoint"
    );
}

#[test]
fn the_loss_goes_down() {
    let (train_tokens, heldout) = (tokens(400, 0), tokens(100, 1000));
    let opts = TrainOptions {
        steps: 40,
        warmup_steps: 4,
        eval_every: 0,
        qk_clip_tau: 100.0,
        router_bias_speed: 0.0,
        adamw_lr: 3e-2,
        muon_lr: 3e-2,
        ..options()
    };
    let dir = scratch("down");
    let mut s = fresh(opts);
    let logs = train(&mut s, &train_tokens, &heldout, &dir, 40, false).unwrap();
    let first = logs[0].ce_loss;
    let held = logs.last().unwrap().heldout_loss.unwrap();
    assert!(
        (first - (48f32).ln()).abs() < 0.1,
        "starts near ln V: {first}"
    );
    assert!(held < first - 1.0, "held-out {held} vs first {first}");
}

fn anatomy(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_flags_exit_2_with_a_clear_error() {
    let dir = scratch("cli");
    let out = dir.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&["--decay", "sawtooth"], "--decay"),
        (&["--seq-len", "100000"], "--seq-len"),
        (&["--beta2-typo"], "unexpected argument"),
        (
            &["--config", "/nonexistent/config.json"],
            "/nonexistent/config.json",
        ),
        (&["--resume", "--lr", "0.1"], "--resume"),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["train", "--out", out, "--quiet"];
        args.extend_from_slice(extra);
        let (code, err) = anatomy(&args);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    // Resuming a directory with no checkpoint names the missing file.
    let (code, err) = anatomy(&["train", "--out", out, "--resume", "--quiet"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("trainer_state.json"), "{err}");
}
