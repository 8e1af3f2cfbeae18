//! Chapter 12 — checkpoints and the log of the training loop (source S0 5.4): the model as
//! `save_pretrained` writes it, the optimiser state beside it, `train_log.jsonl`.

use super::super::params::{Params, write_safetensors_f32};
use super::TrainState;
use super::{StepLog, TrainOptions};
use crate::error::{Error, Result};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;

/// Opens the log for appending, first dropping lines past `step` (a run resumed from an
/// earlier checkpoint than its last log line rewrites what follows); a fresh run starts it
/// empty. The log is never a link, FIFO or device ([`crate::output::open_log`]).
pub(super) fn open_log(path: &Path, step: u64) -> Result<std::fs::File> {
    let mut keep = |line: &str| {
        serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v["step"].as_u64())
            .is_some_and(|s| s <= step)
    };
    let keep: Option<&mut dyn FnMut(&str) -> bool> = (step > 0).then_some(&mut keep);
    crate::output::open_log(path, keep)
}

pub(super) fn write_log_line(f: &mut std::fs::File, path: &Path, line: &StepLog) -> Result<()> {
    let text = serde_json::to_string(line)
        .map_err(|e| Error::Invalid(format!("train: a log line: {e}")))?;
    writeln!(f, "{text}").map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads `train_log.jsonl` back.
pub fn read_log(path: &Path) -> Result<Vec<StepLog>> {
    let bytes = crate::error::read_bounded(path, crate::limits::TEXT_FILE_BYTES, "a training log")?;
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|source| Error::Json {
                what: format!("{} line {}", path.display(), i + 1),
                source,
            })
        })
        .collect()
}

/// Writes the model (`config.json` + `model.safetensors`) and the optimiser state
/// (`trainer_state.safetensors` + `trainer_state.json`) into `dir`.
pub fn save_checkpoint(state: &TrainState, dir: &Path) -> Result<()> {
    state.params.save_pretrained(dir)?;
    let mut tensors: Vec<(String, Vec<usize>, &[f32])> = Vec::new();
    for (i, p) in state.params.params.iter().enumerate() {
        let m = &state.optimizer.exp_avg[i];
        tensors.push((format!("exp_avg.{}", p.name), vec![m.len()], m));
        let v = &state.optimizer.exp_avg_sq[i];
        if !v.is_empty() {
            tensors.push((format!("exp_avg_sq.{}", p.name), vec![v.len()], v));
        }
    }
    for (l, b) in state.router_bias.iter().enumerate() {
        tensors.push((format!("router_bias.{l}"), vec![b.len()], b));
    }
    let named: Vec<(&str, &[usize], &[f32])> = tensors
        .iter()
        .map(|(n, s, d)| (n.as_str(), s.as_slice(), *d))
        .collect();
    write_safetensors_f32(&dir.join("trainer_state.safetensors"), &named)?;
    let doc = json!({
        "step": state.step,
        "optimizer_step": state.optimizer.step,
        "options": state.options,
    });
    let text = serde_json::to_string_pretty(&doc)
        .map_err(|e| Error::Invalid(format!("trainer_state.json: {e}")))?;
    crate::output::write_output(&dir.join("trainer_state.json"), |w| {
        w.write_all(text.as_bytes())?;
        w.write_all(b"\n")
    })
}

/// Reads a checkpoint [`save_checkpoint`] wrote, to go on training.
pub fn load_checkpoint(dir: &Path) -> Result<TrainState> {
    let json_path = dir.join("trainer_state.json");
    let doc = crate::error::read_json(&json_path)?;
    let what = json_path.display().to_string();
    let field_u64 = |f: &str| {
        doc[f].as_u64().ok_or_else(|| Error::Field {
            what: what.clone(),
            field: f.into(),
            problem: "must be a non-negative integer".into(),
        })
    };
    let (step, optimizer_step) = (field_u64("step")?, field_u64("optimizer_step")?);
    let options: TrainOptions =
        serde_json::from_value(doc["options"].clone()).map_err(|source| Error::Json {
            what: format!("{what}: options"),
            source,
        })?;
    let params = Params::load(dir)?;
    let mut state = TrainState::new(params, options)?;
    if step > state.options.steps {
        return Err(Error::Field {
            what,
            field: "step".into(),
            problem: format!("{step} is past the run's {} steps", state.options.steps),
        });
    }
    state.step = step;
    state.optimizer.step = optimizer_step;
    let file = dir.join("trainer_state.safetensors");
    let ckpt = crate::checkpoint::Checkpoint::open_file(&file)?;
    let read = |name: &str, len: usize| -> Result<Vec<f32>> {
        let (data, _) = ckpt.to_f32(name)?;
        if data.len() != len {
            return Err(Error::Invalid(format!(
                "{}: tensor {name}: {} values, the model needs {len}",
                file.display(),
                data.len()
            )));
        }
        Ok(data)
    };
    for (i, p) in state.params.params.iter().enumerate() {
        state.optimizer.exp_avg[i] = read(&format!("exp_avg.{}", p.name), p.data.len())?;
        if !state.optimizer.exp_avg_sq[i].is_empty() {
            state.optimizer.exp_avg_sq[i] = read(&format!("exp_avg_sq.{}", p.name), p.data.len())?;
        }
    }
    for l in 0..state.router_bias.len() {
        let len = state.router_bias[l].len();
        state.router_bias[l] = read(&format!("router_bias.{l}"), len)?;
    }
    Ok(state)
}
