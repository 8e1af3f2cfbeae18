//! Chapter 12's verification table, `book/src/generated/grad-check.md`: for every
//! transformers-autograd case of tests/fixtures/grad/models/ (float64, torch 2.15,
//! transformers 5.24; generator scripts/gen_grad_fixtures.py), the library's
//! `loss_and_grads` and the worst tensor's error as a share of that tensor's largest
//! expected value. The book quotes the table; this test recomputes it.
//! `BLESS=1 cargo test --test book_grad_check` rewrites the file. The test runs the
//! kernels' AVX2 path (`ANATOMY_NO_AVX512`), so the table's digits are the same on AVX2
//! and AVX-512 CPUs.

use llm_anatomy::checkpoint::Checkpoint;
use llm_anatomy::train::backward::{LossOptions, loss_and_grads};
use llm_anatomy::train::params::Params;
use std::path::{Path, PathBuf};

/// The cases, in the order of tests/grad_transformers.rs.
const CASES: &[&str] = &[
    "moe_norm_topk_aux",
    "moe_no_norm_no_aux",
    "moe_no_norm_aux",
    "moe_mixed_layers",
    "moe_tied",
    "moe_fused",
    "moe_yarn_sliding",
    "dense",
    "dense_tied_sliding",
    "dense_linear_rope",
    "moe_batch2",
];

/// The tolerance tests/grad_transformers.rs holds every tensor to.
const TOLERANCE: f32 = 1e-4;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every tensor of a safetensors file as f32, by name.
fn tensors(path: &Path) -> Vec<(String, Vec<f32>)> {
    let file = Checkpoint::open_file(path).unwrap();
    let mut names: Vec<String> = file.names().into_iter().map(String::from).collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let (data, _) = file.to_f32(&n).unwrap();
            (n, data)
        })
        .collect()
}

/// One case: (sequences × tokens, tensors compared, worst tensor, its ratio).
fn check(case: &str) -> (String, usize, String, f32) {
    let dir = root().join("tests/fixtures/grad/models").join(case);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("ids.json")).unwrap()).unwrap();
    let batch: Vec<Vec<u32>> = meta["batch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        })
        .collect();
    let p = Params::load(&dir).unwrap();
    let opts = LossOptions::from_config(&p.config);
    let mut grads = p.zeros_like();
    let losses = loss_and_grads(&p, &batch, &opts, &mut grads).unwrap();
    let mut ours: Vec<(String, Vec<f32>)> = vec![
        ("loss".into(), vec![losses.loss]),
        ("ce_loss".into(), vec![losses.ce_loss]),
    ];
    if let Some(aux) = losses.aux_loss {
        ours.push(("aux_loss".into(), vec![aux]));
    }
    for (param, g) in p.params.iter().zip(grads.grads) {
        ours.push((param.name.clone(), g));
    }
    ours.sort_by(|a, b| a.0.cmp(&b.0));
    let expected = tensors(&dir.join("expected.safetensors"));
    let names = |t: &[(String, Vec<f32>)]| t.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&ours), names(&expected), "{case}: tensor names");
    let mut worst = (String::new(), -1.0f32);
    for ((name, got), (_, want)) in ours.iter().zip(&expected) {
        let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let err = got
            .iter()
            .zip(want)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        let ratio = if scale > 0.0 { err / scale } else { err };
        if ratio > worst.1 {
            worst = (name.clone(), ratio);
        }
    }
    let shape = format!("{} × {}", batch.len(), batch[0].len());
    (shape, ours.len(), worst.0, worst.1)
}

fn render() -> String {
    let mut out = String::from(
        "| case | batch (sequences × tokens) | tensors compared | worst tensor | max \\|ours − autograd\\| / max \\|autograd\\| |\n|---|---|---|---|---|\n",
    );
    let mut overall = 0.0f32;
    for case in CASES {
        let (shape, n, name, ratio) = check(case);
        assert!(
            ratio <= TOLERANCE,
            "{case}: {name} at {ratio:e} of its scale"
        );
        overall = overall.max(ratio);
        out.push_str(&format!(
            "| `{case}` | {shape} | {n} | `{name}` | {ratio:.1e} |\n"
        ));
    }
    out.push_str(&format!(
        "\nWorst over all {} cases: {overall:.1e} of the tensor's scale (tolerance {TOLERANCE:.0e}).\n",
        CASES.len()
    ));
    out
}

#[test]
fn grad_check_table_is_current() {
    // The errors' digits depend on the matmul tiles' summation order, which differs between
    // AVX2 and AVX-512 CPUs; the table is made on the AVX2 path, which every x86-64 CPU
    // the project runs its fast kernels on has, so it reads the same on each of them.
    // SAFETY: this binary's only test sets the variable before any kernel reads it (the
    // kernels read it once, on first use), and no other thread is running yet.
    unsafe { std::env::set_var("ANATOMY_NO_AVX512", "1") };
    let path = root().join("book/src/generated/grad-check.md");
    let text = render();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} missing: run BLESS=1 cargo test --test book_grad_check",
            path.display()
        )
    });
    assert_eq!(
        on_disk,
        text,
        "{} is stale: run BLESS=1 cargo test --test book_grad_check",
        path.display()
    );
}
