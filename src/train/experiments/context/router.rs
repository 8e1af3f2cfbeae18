//! Chapter 13.2 — fine-tuning an MoE on a shifted domain (source S1 troubleshooting
//! table): the English base continued on the Chinese half, with the router trainable or
//! frozen ([`crate::train::trainer::TrainState::freeze_router`]) and a high or a low
//! learning rate; the held-out loss of both domains as it goes.

use super::super::ExperimentOptions;
use super::shared::{
    Domains, Machine, RunRecord, SEED, Sizes, Trained, base, compact_log, load_domains, log_every,
    options, write_json,
};
use crate::error::Result;
use crate::train::trainer::{TrainState, train};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The two learning rates: the base run's peak, and a tenth of it.
pub const HIGH_LR: f64 = 5e-3;
pub const LOW_LR: f64 = 5e-4;

/// One fine-tune of the router experiment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RouterRun {
    pub record: RunRecord,
    pub lr: f64,
    pub frozen_router: bool,
    /// (step, English held-out loss, Chinese held-out loss); step 0 is the base.
    pub evals: Vec<(u64, f32, f32)>,
    /// Per MoE layer at the last step: the busiest expert's share ÷ the mean.
    pub final_max_load_ratio: Vec<f32>,
}

/// `results.json` of `train.finetune_router`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RouterResults {
    pub id: String,
    pub short: bool,
    pub sizes: Sizes,
    pub machine: Machine,
    pub wall_time_s: f64,
    pub base: RunRecord,
    pub runs: Vec<RouterRun>,
}

impl RouterResults {
    pub fn run(&self, frozen: bool, lr: f64) -> Option<&RouterRun> {
        self.runs
            .iter()
            .find(|r| r.frozen_router == frozen && r.lr == lr)
    }
}

/// `train.finetune_router`.
pub fn run(opts: &ExperimentOptions) -> Result<String> {
    let start = Instant::now();
    let machine = Machine::here();
    let sizes = Sizes::new(opts.short);
    let d = load_domains(opts)?;
    let base = base(&sizes, &d)?;
    let mut runs = Vec::new();
    for (frozen, lr) in [
        (false, HIGH_LR),
        (false, LOW_LR),
        (true, HIGH_LR),
        (true, LOW_LR),
    ] {
        runs.push(fine_tune(&sizes, &d, &base, frozen, lr)?);
    }
    let r = RouterResults {
        id: "train.finetune_router".into(),
        short: opts.short,
        sizes,
        machine,
        wall_time_s: start.elapsed().as_secs_f64(),
        base: base.record,
        runs,
    };
    write_json(&opts.out.join("results.json"), &r)?;
    Ok(summary(&r))
}

/// The base continued on the Chinese half at `lr`, its router `frozen` or trainable,
/// with both domains' held-out losses every `router_eval_every` steps.
fn fine_tune(
    sizes: &Sizes,
    d: &Domains,
    base: &Trained,
    frozen: bool,
    lr: f64,
) -> Result<RouterRun> {
    let mut o = options(
        sizes.router_steps,
        sizes.base_batch,
        sizes.train_len,
        lr,
        SEED + 2,
    );
    o.eval_batches = sizes.eval_batches;
    let mut state = TrainState::new(base.params.clone(), o.clone())?;
    if frozen {
        state.freeze_router();
    }
    let name = format!("zh-{}-lr{lr:e}", if frozen { "frozen" } else { "router" });
    let scratch =
        std::env::temp_dir().join(format!("llm-anatomy-router-{}-{name}", std::process::id()));
    let run_start = Instant::now();
    let mut evals = vec![(
        0,
        state.heldout_loss(&d.en_heldout)?,
        state.heldout_loss(&d.zh_heldout)?,
    )];
    let mut logs = Vec::new();
    while state.step < o.steps {
        let until = (state.step + sizes.router_eval_every).min(o.steps);
        let part = train(
            &mut state,
            &d.zh_train,
            &d.zh_heldout,
            &scratch,
            until,
            false,
        )?;
        // The trainer evaluates its own held-out stream (Chinese) at the segment's end.
        let zh = match part.last().and_then(|l| l.heldout_loss) {
            Some(v) => v,
            None => state.heldout_loss(&d.zh_heldout)?,
        };
        evals.push((state.step, state.heldout_loss(&d.en_heldout)?, zh));
        logs.extend(part);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let final_max_load_ratio = logs
        .last()
        .map(|l| l.max_load_ratio.clone())
        .unwrap_or_default();
    Ok(RouterRun {
        record: RunRecord {
            name,
            domain: "zh".into(),
            init_from: Some(base.record.name.clone()),
            rope: base.record.rope.clone(),
            frozen_router: frozen,
            options: o.clone(),
            train_wall_s: run_start.elapsed().as_secs_f64(),
            from_cache: false,
            log: compact_log(&logs, log_every(o.steps)),
        },
        lr,
        frozen_router: frozen,
        evals,
        final_max_load_ratio,
    })
}

/// One line per fine-tune (held-out losses first → last), and the wall time.
fn summary(r: &RouterResults) -> String {
    let mut s = String::new();
    for run in &r.runs {
        let (first, last) = (run.evals[0], run.evals[run.evals.len() - 1]);
        s += &format!(
            "  router {}, lr {:e}: zh held-out {:.3} → {:.3}, en {:.3} → {:.3}\n",
            if run.frozen_router {
                "frozen"
            } else {
                "trainable"
            },
            run.lr,
            first.2,
            last.2,
            first.1,
            last.1
        );
    }
    s + &format!("  wall time {:.0} s\n", r.wall_time_s)
}
