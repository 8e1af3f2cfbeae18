//! RoPE scaling against Hugging Face transformers' own initialisation.
//!
//! Every file in tests/fixtures/rope/ was written by scripts/gen_rope_fixtures.py
//! (transformers 5.24.0, torch 2.15.0, versions recorded in each fixture) from
//! `ROPE_INIT_FUNCTIONS[rope_type]` or the model's `compute_default_rope_parameters`. Each
//! case is run through the library (`RopeConfig::new` / `from_model_config`, then `init`)
//! and through the built `anatomy rope ... --json`; every `inv_freq` entry and the
//! `attention_factor` must agree to 1e-6 relative. transformers computes in float32, so
//! agreement is limited by its rounding (≈ 1e-7), not by ours.

use llm_anatomy::long_context::scaling::{RopeConfig, RopeInit};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const REL_TOL: f64 = 1e-6;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Fixture {
    path: PathBuf,
    name: String,
    json: Value,
}

impl Fixture {
    fn inputs(&self) -> &Value {
        &self.json["inputs"]
    }

    fn head_dim(&self) -> usize {
        self.inputs()["head_dim"]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: inputs.head_dim", self.name)) as usize
    }

    fn theta(&self) -> f64 {
        self.inputs()["theta"]
            .as_f64()
            .unwrap_or_else(|| panic!("{}: inputs.theta", self.name))
    }

    fn scaling(&self) -> Option<&Value> {
        Some(&self.inputs()["scaling"]).filter(|v| !v.is_null())
    }

    fn max_position_embeddings(&self) -> Option<usize> {
        self.inputs()["max_position_embeddings"]
            .as_u64()
            .map(|n| n as usize)
    }

    fn seq_len(&self) -> Option<usize> {
        self.inputs()["seq_len"].as_u64().map(|n| n as usize)
    }

    fn expected(&self) -> RopeInit {
        let inv_freq = self.json["inv_freq"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: inv_freq", self.name))
            .iter()
            .map(|v| v.as_f64().expect("inv_freq entry"))
            .collect();
        let attention_factor = self.json["attention_factor"]
            .as_f64()
            .unwrap_or_else(|| panic!("{}: attention_factor", self.name));
        RopeInit {
            inv_freq,
            attention_factor,
        }
    }
}

fn fixtures() -> Vec<Fixture> {
    let dir = repo_root().join("tests/fixtures/rope");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("fixture readable");
            let json: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = json["name"].as_str().expect("fixture name").to_string();
            Fixture { path, name, json }
        })
        .collect()
}

/// Largest relative error over inv_freq and attention_factor; Err if lengths differ or a
/// value is off by more than the tolerance.
fn compare(ours: &RopeInit, theirs: &RopeInit) -> Result<f64, String> {
    if ours.inv_freq.len() != theirs.inv_freq.len() {
        return Err(format!(
            "inv_freq length {} vs transformers {}",
            ours.inv_freq.len(),
            theirs.inv_freq.len()
        ));
    }
    let pairs = ours
        .inv_freq
        .iter()
        .zip(&theirs.inv_freq)
        .enumerate()
        .map(|(i, (o, t))| (format!("inv_freq[{i}]"), *o, *t))
        .chain(std::iter::once((
            "attention_factor".to_string(),
            ours.attention_factor,
            theirs.attention_factor,
        )));
    let mut worst = 0.0f64;
    for (what, o, t) in pairs {
        let diff = (o - t).abs();
        // NaN must fail too.
        if diff.is_nan() || diff > REL_TOL * t.abs() {
            return Err(format!("{what}: ours {o:e}, transformers {t:e}"));
        }
        if t != 0.0 {
            worst = worst.max(diff / t.abs());
        }
    }
    Ok(worst)
}

fn library_from_inputs(f: &Fixture) -> Result<RopeInit, String> {
    let cfg = RopeConfig::new(
        f.head_dim(),
        f.theta(),
        f.scaling(),
        f.max_position_embeddings(),
        &f.name,
    )
    .map_err(|e| e.to_string())?;
    cfg.init(f.seq_len()).map_err(|e| e.to_string())
}

fn library_from_model_config(f: &Fixture, config_path: &str) -> Result<RopeInit, String> {
    let path = repo_root().join(config_path);
    let config = llm_anatomy::error::read_json(&path).map_err(|e| e.to_string())?;
    let cfg = RopeConfig::from_model_config(&config, config_path).map_err(|e| e.to_string())?;
    if cfg.head_dim != f.head_dim() {
        return Err(format!(
            "head_dim {} vs transformers {}",
            cfg.head_dim,
            f.head_dim()
        ));
    }
    cfg.init(f.seq_len()).map_err(|e| e.to_string())
}

fn cli_args(f: &Fixture) -> Vec<String> {
    let mut args = vec![
        "rope".to_string(),
        "--head-dim".into(),
        f.head_dim().to_string(),
        "--theta".into(),
        // `{:?}` keeps a float's full precision and a decimal point.
        format!("{:?}", f.theta()),
    ];
    if let Some(s) = f.scaling() {
        args.push("--scaling".into());
        args.push(s.to_string());
    }
    if let Some(n) = f.max_position_embeddings() {
        args.push("--max-position-embeddings".into());
        args.push(n.to_string());
    }
    if let Some(n) = f.seq_len() {
        args.push("--seq-len".into());
        args.push(n.to_string());
    }
    args.push("--json".into());
    args
}

fn run_cli(args: &[String]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(args)
        .output()
        .expect("anatomy binary runs")
}

fn cli(f: &Fixture) -> Result<RopeInit, String> {
    let out = run_cli(&cli_args(f));
    if !out.status.success() {
        return Err(format!(
            "exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let json: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("stdout: {e}"))?;
    let inv_freq = json["inv_freq"]
        .as_array()
        .ok_or("no inv_freq in output")?
        .iter()
        .map(|v| v.as_f64().ok_or("inv_freq entry not a number"))
        .collect::<Result<Vec<_>, _>>()?;
    let attention_factor = json["attention_factor"]
        .as_f64()
        .ok_or("no attention_factor in output")?;
    Ok(RopeInit {
        inv_freq,
        attention_factor,
    })
}

/// Runs `ours` on every fixture, prints the worst relative error, fails listing every
/// disagreeing case.
fn check_all(label: &str, ours: impl Fn(&Fixture) -> Option<Result<RopeInit, String>>) -> usize {
    let mut failures = Vec::new();
    let mut worst = (0.0f64, String::new());
    let mut checked = 0;
    for f in fixtures() {
        let Some(result) = ours(&f) else { continue };
        checked += 1;
        match result.and_then(|init| compare(&init, &f.expected())) {
            Ok(err) if err >= worst.0 => worst = (err, f.name.clone()),
            Ok(_) => {}
            Err(e) => failures.push(format!("{} ({}): {e}", f.name, f.path.display())),
        }
    }
    eprintln!(
        "{label}: {checked} fixtures, max relative error {:.3e} ({})",
        worst.0, worst.1
    );
    assert!(failures.is_empty(), "{label}:\n{}", failures.join("\n"));
    checked
}

#[test]
fn fixture_directory_is_not_empty() {
    let all = fixtures();
    assert!(all.len() >= 30, "only {} RoPE fixtures", all.len());
    // Every scaling type and both fixture kinds are present.
    let types: std::collections::BTreeSet<String> = all
        .iter()
        .filter_map(|f| {
            let p = &f.json["transformers_rope_parameters"];
            p["rope_type"].as_str().map(str::to_string)
        })
        .collect();
    for t in [
        "default",
        "linear",
        "dynamic",
        "yarn",
        "llama3",
        "longrope",
        "proportional",
    ] {
        assert!(types.contains(t), "no fixture of rope_type {t}");
    }
    let configs = all
        .iter()
        .filter(|f| f.json["kind"] == "model_config")
        .count();
    assert!(configs >= 5, "only {configs} whole-config fixtures");
    for f in &all {
        assert_eq!(f.json["transformers_version"], "5.24.0", "{}", f.name);
        assert!(
            !f.expected().inv_freq.is_empty(),
            "{}: empty inv_freq",
            f.name
        );
    }
}

#[test]
fn library_matches_transformers() {
    let n = check_all("RopeConfig::new + init", |f| Some(library_from_inputs(f)));
    assert_eq!(n, fixtures().len());
}

#[test]
fn model_config_matches_transformers() {
    let n = check_all("RopeConfig::from_model_config + init", |f| {
        f.json["config_path"]
            .as_str()
            .map(|p| library_from_model_config(f, p))
    });
    assert!(n >= 5, "only {n} config.json fixtures checked");
}

#[test]
fn cli_matches_transformers() {
    let n = check_all("anatomy rope --json", |f| Some(cli(f)));
    assert_eq!(n, fixtures().len());
}

/// Bad input: exit code 2 and a message naming the field at fault.
fn assert_bad_input(args: &[&str], field: &str) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = run_cli(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: stderr {stderr}");
    assert!(
        stderr.contains(field),
        "{args:?}: message does not name {field}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}: wrote to stdout on error");
}

#[test]
fn cli_unknown_rope_type_is_bad_input() {
    assert_bad_input(
        &[
            "rope",
            "--head-dim",
            "128",
            "--theta",
            "10000",
            "--scaling",
            r#"{"rope_type":"ntk-by-parts","factor":4}"#,
            "--json",
        ],
        "rope_type",
    );
}

#[test]
fn cli_missing_factor_is_bad_input() {
    for scaling in [
        r#"{"rope_type":"linear"}"#,
        r#"{"type":"dynamic"}"#,
        r#"{"rope_type":"yarn","original_max_position_embeddings":4096}"#,
        r#"{"rope_type":"llama3","low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192}"#,
    ] {
        assert_bad_input(
            &[
                "rope",
                "--head-dim",
                "128",
                "--theta",
                "10000",
                "--scaling",
                scaling,
                "--max-position-embeddings",
                "32768",
                "--json",
            ],
            "factor",
        );
    }
}

#[test]
fn cli_malformed_scaling_json_is_bad_input() {
    assert_bad_input(
        &[
            "rope",
            "--head-dim",
            "128",
            "--theta",
            "10000",
            "--scaling",
            r#"{"rope_type":"yarn","factor":4,"#,
            "--json",
        ],
        "--scaling",
    );
}

#[test]
fn cli_odd_head_dim_is_bad_input() {
    assert_bad_input(
        &["rope", "--head-dim", "127", "--theta", "10000", "--json"],
        "head_dim",
    );
}

#[test]
fn cli_longrope_wrong_factor_count_is_bad_input() {
    assert_bad_input(
        &[
            "rope",
            "--head-dim",
            "96",
            "--theta",
            "10000",
            "--scaling",
            r#"{"rope_type":"longrope","short_factor":[1,1],"long_factor":[2,2],"original_max_position_embeddings":4096}"#,
            "--max-position-embeddings",
            "131072",
            "--json",
        ],
        "short_factor",
    );
}

#[test]
fn fixture_paths_are_relative_to_the_repo() {
    for f in fixtures() {
        if let Some(p) = f.json["config_path"].as_str() {
            assert!(Path::new(p).is_relative(), "{}: {p}", f.name);
            assert!(repo_root().join(p).is_file(), "{}: {p} missing", f.name);
        }
    }
}

#[test]
fn model_config_bad_rope_fields_are_errors_naming_the_field() {
    let cases = [
        (
            serde_json::json!({"head_dim": 128, "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}),
            "rope_parameters",
        ),
        (
            serde_json::json!({"head_dim": 128, "rope_theta": 1e4, "partial_rotary_factor": 1.5}),
            "partial_rotary_factor",
        ),
        (
            serde_json::json!({"head_dim": 128, "rope_parameters": {"rope_type": "default", "rope_theta": -3}}),
            "rope_theta",
        ),
        (
            serde_json::json!({"head_dim": 96, "max_position_embeddings": 131072,
                "original_max_position_embeddings": 4096,
                "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}),
            "short_factor",
        ),
        (
            serde_json::json!({"head_dim": 128, "rope_scaling": "yarn"}),
            "rope_scaling",
        ),
    ];
    for (config, field) in cases {
        let err = RopeConfig::from_model_config(&config, "config.json")
            .expect_err(&config.to_string())
            .to_string();
        assert!(
            err.contains("config.json") && err.contains(field),
            "{config}: {err}"
        );
    }
}
