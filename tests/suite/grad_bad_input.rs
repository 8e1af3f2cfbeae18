//! Bad input to `anatomy grad` (chapter 12): a missing model directory, an id past the
//! vocabulary, a single id (nothing to predict) — each exits 2 with a message naming the
//! problem, never a panic. Uses the fixture tests/fixtures/grad/models/dense
//! (scripts/gen_grad_fixtures.py).

use crate::common;
use common::anatomy;

use std::path::Path;

fn good_dir() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/grad/models/dense")
        .to_str()
        .unwrap()
        .to_string()
}

/// Runs `anatomy grad DIR --ids IDS --out TMP`; returns (exit code, stderr).
fn grad(dir: &str, ids: &str, tag: &str) -> (Option<i32>, String) {
    let scratch = crate::common::scratch(&format!("grad-bad-{tag}"));
    let out = scratch.join("grad.safetensors");
    let run = anatomy(&["grad", dir, "--ids", ids, "--out", out.to_str().unwrap()]);
    (
        run.status.code(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    )
}

fn assert_bad_input(code: Option<i32>, stderr: &str, what: &str, needles: &[&str]) {
    assert_eq!(code, Some(2), "{what}: exit code; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: panicked: {stderr}");
    let lower = stderr.to_lowercase();
    assert!(
        needles.iter().any(|n| lower.contains(n)),
        "{what}: message should mention one of {needles:?}: {stderr}"
    );
}

#[test]
fn missing_model_dir() {
    let parent = crate::common::scratch("grad-missing");
    let dir = parent.join("anatomy-grad-no-such-dir");
    let dir = dir.to_str().unwrap();
    let (code, err) = grad(dir, "1,2,3", "missing");
    assert_bad_input(code, &err, "missing dir", &["anatomy-grad-no-such-dir"]);
}

#[test]
fn id_past_the_vocabulary() {
    // The fixture's vocabulary has 96 entries: 96 is one past the last id.
    let (code, err) = grad(&good_dir(), "1,2,96", "vocab");
    assert_bad_input(code, &err, "id 96", &["96"]);
    assert!(
        err.to_lowercase().contains("vocab"),
        "should name the vocabulary: {err}"
    );
}

#[test]
fn one_id_has_nothing_to_predict() {
    let (code, err) = grad(&good_dir(), "5", "one");
    assert_bad_input(
        code,
        &err,
        "one id",
        &["two", "2 ids", "at least", "one id", "1 id"],
    );
}
