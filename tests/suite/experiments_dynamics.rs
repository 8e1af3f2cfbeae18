//! Chapter 13.1's experiments (`train.collapse`, `train.muon_efficiency`, `train.max_logit`,
//! `train.glitch_decay`): each runs end to end in its `--short` form on a small corpus,
//! writes a results.json whose structure its verdict rule reads; and each claim's status is
//! pinned against the recorded results when they are in data/train/experiments/.

use crate::common::Scratch;
use llm_anatomy::claims::{self, Status};
use llm_anatomy::train::experiments::dynamics::{
    self, collapse, glitch, max_logit, muon, read_results,
};
use llm_anatomy::train::experiments::{ExperimentOptions, recorded_dir};
use std::path::Path;

/// A corpus of three short documents (one is held out), English and Chinese.
fn tiny_corpus(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let docs = [
        "Ownership is a set of rules that govern how a Rust program manages memory. \
         Every value has an owner, and there can only be one owner at a time.",
        "所有权是一组规则，管理 Rust 程序如何使用内存。每个值都有一个所有者。\
         当所有者离开作用域时，这个值将被丢弃。",
        "References let you refer to a value without taking ownership of it. \
         A reference is like a pointer that is guaranteed to point to a valid value.",
    ];
    for (i, d) in docs.iter().enumerate() {
        std::fs::write(dir.join(format!("doc{i}.txt")), d.repeat(3)).unwrap();
    }
}

/// The short form's options over a tiny corpus, both in a scratch directory that is
/// removed when the returned [`Scratch`] drops.
fn short_options(name: &str) -> (Scratch, ExperimentOptions) {
    let root = crate::common::scratch(&format!("expdyn-{name}"));
    tiny_corpus(&root.join("corpus"));
    let opts = ExperimentOptions {
        out: root.join("out"),
        data: root.join("corpus"),
        vocab: llm_anatomy::tokenizer::qwen_vocab_path(),
        short: true,
        threads: 2,
    };
    (root, opts)
}

fn check_header(h: &dynamics::Header, id: &str) {
    assert_eq!(h.id, id);
    assert!(h.short);
    assert_eq!(h.command, format!("anatomy experiments {id} --record"));
    assert!(h.wall_s > 0.0 && h.train_tokens > 0 && h.heldout_tokens > 0);
}

#[test]
fn collapse_short_run() {
    let (_root, opts) = short_options("collapse");
    let summary = dynamics::run(collapse::ID, &opts).unwrap();
    assert!(summary.contains("busiest expert"), "{summary}");
    let r: collapse::CollapseResults = read_results(&opts.out).unwrap().unwrap();
    check_header(&r.header, collapse::ID);
    assert_eq!(r.runs.len(), 3);
    for run in &r.runs {
        assert_eq!(run.steps_done, 3);
        assert_eq!(run.log.len(), 3);
        let counts = &run.log[0].expert_counts;
        assert_eq!(counts.len(), 4, "one row of picks per MoE layer");
        // 2 sequences × 16 tokens, top-2 of 8 experts.
        assert!(
            counts
                .iter()
                .all(|c| c.len() == 8 && c.iter().sum::<usize>() == 64)
        );
    }
    assert_eq!(r.runs[0].options.aux_loss_coef, Some(0.0));
    assert_eq!(r.runs[1].options.aux_loss_coef, Some(collapse::AUX_COEF));
    assert_eq!(r.runs[2].options.router_bias_speed, collapse::BIAS_SPEED);
    let v = collapse::verdict(&r).unwrap();
    assert!(v.worst_ratio.iter().all(|&x| (1.0..=4.0).contains(&x)));
}

/// A fake run whose final held-out loss is `loss`.
fn fake_run(lr: f64, loss: f32) -> dynamics::RunRecord {
    dynamics::RunRecord {
        name: format!("lr {lr:e}"),
        options: Default::default(),
        tie_word_embeddings: true,
        steps_done: 1,
        diverged: None,
        wall_s: 0.0,
        tokens_per_s: 0.0,
        initial_probe: Vec::new(),
        log: vec![dynamics::Sample {
            step: 1,
            loss,
            heldout_loss: Some(loss),
            max_logit: 0.0,
            grad_norm: 0.0,
            qk_clipped_heads: 0,
            expert_counts: Vec::new(),
            probe: Vec::new(),
        }],
    }
}

/// The sweep grows its grid past the end that holds the best rate until a worse rate lies on
/// each side: a loss bowl with its bottom at 0.03 (above the starting grid) takes two
/// extensions, 3.125e-2 (best) and 7.8125e-2 (worse); a bowl below the grid takes one step
/// down; and a sweep that runs out of rates says it is not bracketed.
#[test]
fn the_sweep_brackets_the_best_rate() {
    let bowl = |bottom: f64| {
        move |lr: f64| -> llm_anatomy::error::Result<dynamics::RunRecord> {
            Ok(fake_run(lr, 1.0 + ((lr / bottom).ln().powi(2)) as f32))
        }
    };
    let s = muon::bracket_sweep(&muon::LRS, muon::MAX_RATES, bowl(0.03)).unwrap();
    let rates: Vec<String> = s.runs.iter().map(|r| r.name.clone()).collect();
    assert_eq!(rates.len(), 5, "{rates:?}");
    assert!(
        (s.best - 1.25e-2 * muon::GRID_STEP).abs() < 1e-12 && s.bracketed,
        "{rates:?}"
    );
    let s = muon::bracket_sweep(&muon::LRS, muon::MAX_RATES, bowl(1e-3)).unwrap();
    assert!((s.best - 2e-3 / muon::GRID_STEP).abs() < 1e-12 && s.bracketed);
    assert_eq!(s.runs.len(), 5, "8e-4 is best, 3.2e-4 below it worse");
    let s = muon::bracket_sweep(&muon::LRS, 4, bowl(10.0)).unwrap();
    assert_eq!(s.runs.len(), 4);
    assert!(!s.bracketed);
}

#[test]
fn muon_short_run() {
    let (_root, opts) = short_options("muon");
    dynamics::run(muon::ID, &opts).unwrap();
    let r: muon::MuonResults = read_results(&opts.out).unwrap().unwrap();
    check_header(&r.header, muon::ID);
    assert_eq!(
        r.sweep.len(),
        4,
        "the short form sweeps two rates per optimiser"
    );
    assert!(muon::LRS.contains(&r.best_adamw_lr) && muon::LRS.contains(&r.best_muon_lr));
    assert_eq!(
        r.runs.len(),
        2,
        "one seed in the short form, AdamW and Muon"
    );
    assert!(r.runs.iter().all(|x| x.final_heldout().is_some()));
    let v = muon::verdict(&r).unwrap();
    assert_eq!((v.adamw.len(), v.muon.len()), (1, 1));
    assert!(v.spread >= 0.0 && v.gain.is_finite());
}

#[test]
fn max_logit_short_run() {
    let (_root, opts) = short_options("maxlogit");
    dynamics::run(max_logit::ID, &opts).unwrap();
    let r: max_logit::MaxLogitResults = read_results(&opts.out).unwrap().unwrap();
    check_header(&r.header, max_logit::ID);
    assert_eq!(r.runs.len(), 3);
    assert_eq!(r.runs[2].options.qk_clip_tau, max_logit::TAU);
    assert_eq!(r.runs[1].options.grad_clip, max_logit::GRAD_CLIP);
    let v = max_logit::verdict(&r).unwrap();
    assert!(v.first.iter().all(|&x| x > 0.0 && x.is_finite()));
}

#[test]
fn glitch_short_run() {
    let (_root, opts) = short_options("glitch");
    dynamics::run(glitch::ID, &opts).unwrap();
    let r: glitch::GlitchResults = read_results(&opts.out).unwrap().unwrap();
    check_header(&r.header, glitch::ID);
    // A corpus of three documents leaves nearly the whole vocabulary absent.
    assert!(r.absent_tokens > 150_000 && r.absent_tokens < r.ordinary_tokens);
    assert_eq!(r.runs.len(), 2);
    for g in &r.runs {
        assert_eq!(g.hist_absent.iter().sum::<usize>(), r.absent_tokens);
        assert_eq!(g.run.initial_probe.len(), 2);
        assert!(g.predicted_shrink > 0.99 && g.predicted_shrink <= 1.0);
        assert!(!g.repetition.is_empty());
    }
    let v = glitch::verdict(&r).unwrap();
    assert!(v.ratio > 0.0 && v.tied_ratio > 0.0);
}

/// Each claim: needs-data when nothing is recorded; otherwise the status the rule gives on
/// the recorded file (so a recorded file that stops parsing fails here).
#[test]
fn claims_follow_the_recorded_results() {
    for id in dynamics::IDS {
        let claim = claims::find(id).unwrap();
        let recorded = recorded_dir(id).join("results.json").exists();
        if !recorded {
            assert_eq!(claim.status, Status::NeedsData, "{id}");
            assert!(
                claim
                    .note
                    .contains(&format!("anatomy experiments {id} --record"))
            );
            continue;
        }
        let dir = recorded_dir(id);
        let reproduced = match *id {
            collapse::ID => collapse::verdict(&read_results(&dir).unwrap().unwrap())
                .unwrap()
                .reproduced(),
            muon::ID => muon::verdict(&read_results(&dir).unwrap().unwrap())
                .unwrap()
                .reproduced(),
            max_logit::ID => max_logit::verdict(&read_results(&dir).unwrap().unwrap())
                .unwrap()
                .reproduced(),
            glitch::ID => glitch::verdict(&read_results(&dir).unwrap().unwrap())
                .unwrap()
                .reproduced(),
            other => panic!("unknown id {other}"),
        };
        let expected = if reproduced {
            Status::Reproduced
        } else {
            Status::NotShown
        };
        assert_eq!(claim.status, expected, "{id}: {}", claim.computed);
        assert!(claim.value.is_some_and(f64::is_finite), "{id}");
    }
}

/// The recorded results (data/train/experiments/): each claim's
/// status and headline value as computed from them. A rerun that changes them must update
/// these pins and the book's chapter 13.1 together.
#[test]
fn recorded_results_are_pinned() {
    let pins: [(&str, Status, f64); 4] = [
        // The busiest expert's share ÷ mean in the worst layer, no balancing loss.
        (collapse::ID, Status::NotShown, 4.0),
        // AdamW's mean final held-out loss − Muon's, over 3 seeds.
        (muon::ID, Status::Reproduced, 0.74083),
        // Unclipped max logit, last 10% ÷ first window.
        (max_logit::ID, Status::NotShown, 1.80933),
        // Untied: median absent ÷ median present input-embedding norm.
        (glitch::ID, Status::NotShown, 0.96490),
    ];
    for (id, status, value) in pins {
        let path = recorded_dir(id).join("results.json");
        if !path.exists() {
            continue;
        }
        let claim = claims::find(id).unwrap();
        assert_eq!(claim.status, status, "{id}: {}", claim.computed);
        let got = claim.value.unwrap();
        assert!(
            (got - value).abs() <= 1e-4 * value.abs(),
            "{id}: value {got}, pinned {value}"
        );
    }
    let header = |id: &str| -> dynamics::Header {
        let v: serde_json::Value = read_results(&recorded_dir(id)).unwrap().unwrap();
        serde_json::from_value(v["header"].clone()).unwrap()
    };
    for id in dynamics::IDS {
        if recorded_dir(id).join("results.json").exists() {
            let h = header(id);
            assert!(
                !h.short,
                "{id}: the recorded results must not be the --short form"
            );
            assert!(h.git_commit.is_some() && h.cpu_model.is_some(), "{id}");
        }
    }
}

/// `book/src/generated/train-dynamics.md` (chapter 13.1's verdicts) is the registry's table
/// of this group's claims; `BLESS=1 cargo test --test suite experiments_dynamics::book_table`
/// rewrites it.
#[test]
fn book_table_is_current() {
    let rows: Vec<claims::Claim> = dynamics::IDS
        .iter()
        .filter_map(|id| claims::find(id))
        .collect();
    assert_eq!(rows.len(), dynamics::IDS.len());
    let text = claims::markdown_table(&rows);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src/generated/train-dynamics.md");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        on_disk,
        text,
        "{} is stale: run BLESS=1 cargo test --test suite experiments_dynamics::book_table",
        path.display()
    );
}
