//! Expert parallelism: experts live on different workers; tokens travel to them and back.
//!
//! Source S0 5.4.6 and S1 §3 ("communication cost"). Each worker holds a copy of the
//! router (and, in a real model, of attention) and only its own experts; it starts with its
//! own share of the tokens (data parallel). An MoE layer then runs in six steps: route
//! locally; **all-to-all #1 (dispatch)** — send each (token, expert) pair to the worker that
//! owns the expert; run the local experts on what arrived; **all-to-all #2 (combine)** —
//! send each weighted output back to the token's home worker; add them up. Workers here are
//! threads and the all-to-alls are real message exchanges over `std::sync::mpsc` channels.
//! The output equals the single-worker [`moe_bucketed`](super::layer::moe_bucketed) bit for
//! bit, because every partial result is computed by the same code and summed in the same
//! (expert-index) order. Claim `moe.ep_example`.

use super::expert::Expert;
use super::layer::{OwnedMoe, route_tokens};
use super::router::Routing;
use crate::kernels::Matrix;
use std::sync::mpsc;

/// Bytes of one f32 activation element on the wire.
const F32: usize = 4;
/// Metadata per dispatched pair: token id (u32), expert id (u32), weight (f32).
const DISPATCH_META: usize = 12;
/// Metadata per returned pair: token id (u32), expert id (u32).
const COMBINE_META: usize = 8;

enum Dispatch {
    Pair {
        token: usize,
        expert: usize,
        weight: f32,
        x: Vec<f32>,
        from: usize,
    },
    Done,
}

enum Combine {
    Pair {
        token: usize,
        expert: usize,
        y: Vec<f32>,
    },
    Done,
}

/// What crossed between workers (pairs sent to one's own experts never leave the worker).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub local_pairs: usize,
    pub remote_pairs: usize,
    /// Activation bytes of all-to-all #1 (token vectors, f32).
    pub dispatch_bytes: usize,
    /// Activation bytes of all-to-all #2 (weighted expert outputs, f32).
    pub combine_bytes: usize,
    /// Token ids, expert ids and weights sent along.
    pub metadata_bytes: usize,
}

/// One worker's view after the layer ran.
#[derive(Clone, Debug)]
pub struct WorkerLog {
    pub worker: usize,
    pub tokens: Vec<usize>,
    pub experts: Vec<usize>,
    /// (token, expert, from worker) pairs this worker's experts processed.
    pub received: Vec<(usize, usize, usize)>,
    pub traffic: Traffic,
}

/// What a worker thread hands back: its tokens' outputs, their routings, its log.
type WorkerOutput = (Vec<(usize, Vec<f32>)>, Vec<Routing>, WorkerLog);

/// The result of an expert-parallel layer.
#[derive(Clone, Debug)]
pub struct EpResult {
    pub output: Vec<f32>,
    pub routings: Vec<Routing>,
    pub workers: Vec<WorkerLog>,
    pub traffic: Traffic,
}

/// The worker that owns expert `e` when `num_experts` are split evenly over `workers`.
pub fn owner(e: usize, num_experts: usize, workers: usize) -> usize {
    e / num_experts.div_ceil(workers)
}

/// Runs one MoE layer on `workers` threads. Tokens are split contiguously over workers
/// (their "home"), experts too. Same contract as `moe_bucketed`.
pub fn expert_parallel(
    x: &[f32],
    hidden: usize,
    router: &Matrix,
    experts: &[Expert],
    k: usize,
    norm_topk_prob: bool,
    workers: usize,
) -> EpResult {
    assert!(workers >= 1, "expert_parallel: at least one worker");
    let tokens = x.len() / hidden;
    let (dispatch_tx, dispatch_rx): (Vec<_>, Vec<_>) =
        (0..workers).map(|_| mpsc::channel::<Dispatch>()).unzip();
    let (combine_tx, combine_rx): (Vec<_>, Vec<_>) =
        (0..workers).map(|_| mpsc::channel::<Combine>()).unzip();
    let ep = Ep {
        x,
        hidden,
        router,
        experts,
        k,
        norm_topk_prob,
        workers,
        per_worker: tokens.div_ceil(workers),
        dispatch_tx,
        combine_tx,
    };
    let results: Vec<WorkerOutput> = std::thread::scope(|s| {
        let ep = &ep;
        let handles: Vec<_> = dispatch_rx
            .into_iter()
            .zip(combine_rx)
            .enumerate()
            .map(|(w, (d_rx, c_rx))| s.spawn(move || worker(ep, w, d_rx, c_rx)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect()
    });
    gather(x.len(), hidden, tokens, results)
}

/// What every worker shares: the layer, the split, and a sender to every worker.
struct Ep<'a> {
    x: &'a [f32],
    hidden: usize,
    router: &'a Matrix<'a>,
    experts: &'a [Expert<'a>],
    k: usize,
    norm_topk_prob: bool,
    workers: usize,
    per_worker: usize,
    dispatch_tx: Vec<mpsc::Sender<Dispatch>>,
    combine_tx: Vec<mpsc::Sender<Combine>>,
}

impl Ep<'_> {
    /// The worker token `t` starts on.
    fn home(&self, t: usize) -> usize {
        t / self.per_worker
    }
}

/// A pair as it arrived at its expert's owner: (token, expert, weight, x, from worker).
type Arrived = (usize, usize, f32, Vec<f32>, usize);

/// Worker `w`'s six steps: route and dispatch, receive, run its experts and send back,
/// receive, combine.
fn worker(
    ep: &Ep,
    w: usize,
    d_rx: mpsc::Receiver<Dispatch>,
    c_rx: mpsc::Receiver<Combine>,
) -> WorkerOutput {
    let (x, hidden, num_experts) = (ep.x, ep.hidden, ep.experts.len());
    let mine: Vec<usize> = (0..x.len() / hidden).filter(|&t| ep.home(t) == w).collect();
    let mut traffic = Traffic::default();
    let routings = dispatch(ep, w, &mine, &mut traffic);
    let inbox = receive_dispatched(ep.workers, &d_rx);
    let received = run_experts(ep, w, inbox, &mut traffic);
    let back = receive_combined(ep.workers, &c_rx);
    let out = combine(hidden, &mine, back);
    let log = WorkerLog {
        worker: w,
        tokens: mine,
        experts: (0..num_experts)
            .filter(|&e| owner(e, num_experts, ep.workers) == w)
            .collect(),
        received,
        traffic,
    };
    (out, routings, log)
}

/// Steps 1–3: route worker `w`'s tokens and send every pair to its expert's owner.
fn dispatch(ep: &Ep, w: usize, mine: &[usize], traffic: &mut Traffic) -> Vec<Routing> {
    let (x, hidden, router, k) = (ep.x, ep.hidden, ep.router, ep.k);
    let (num_experts, workers, dispatch_tx) = (ep.experts.len(), ep.workers, &ep.dispatch_tx);
    let my_x: Vec<f32> = mine
        .iter()
        .flat_map(|&t| x[t * hidden..(t + 1) * hidden].iter().copied())
        .collect();
    // ANCHOR: ep_dispatch
    // Steps 1–2: route my tokens with my copy of the router.
    let routings = route_tokens(&my_x, hidden, router, k, ep.norm_topk_prob);
    // Step 3: all-to-all #1, every pair to its expert's owner.
    for (&t, r) in mine.iter().zip(&routings) {
        for (&e, &p) in r.experts.iter().zip(&r.weights) {
            let dest = owner(e, num_experts, workers);
            if dest == w {
                traffic.local_pairs += 1;
            } else {
                traffic.remote_pairs += 1;
                traffic.dispatch_bytes += hidden * F32;
                traffic.metadata_bytes += DISPATCH_META;
            }
            let msg = Dispatch::Pair {
                token: t,
                expert: e,
                weight: p,
                x: x[t * hidden..(t + 1) * hidden].to_vec(),
                from: w,
            };
            dispatch_tx[dest].send(msg).expect("worker alive");
        }
    }
    for tx in dispatch_tx {
        tx.send(Dispatch::Done).expect("worker alive");
    }
    // ANCHOR_END: ep_dispatch
    routings
}

/// Receives pairs until every worker (this one included) said Done.
fn receive_dispatched(workers: usize, d_rx: &mpsc::Receiver<Dispatch>) -> Vec<Arrived> {
    let mut inbox = Vec::new();
    let mut done = 0;
    while done < workers {
        match d_rx.recv().expect("dispatch channel open") {
            Dispatch::Done => done += 1,
            Dispatch::Pair {
                token,
                expert,
                weight,
                x,
                from,
            } => inbox.push((token, expert, weight, x, from)),
        }
    }
    inbox
}

/// Steps 4–5: worker `w`'s experts on what arrived, each weighted output sent to its
/// token's home; returns the (token, expert, from worker) pairs processed.
fn run_experts(
    ep: &Ep,
    w: usize,
    mut inbox: Vec<Arrived>,
    traffic: &mut Traffic,
) -> Vec<(usize, usize, usize)> {
    let (hidden, experts, combine_tx) = (ep.hidden, ep.experts, &ep.combine_tx);
    // ANCHOR: ep_experts
    // Step 4: my experts, each once on its batch (expert-index order).
    inbox.sort_by_key(|p| (p.1, p.0));
    let received: Vec<(usize, usize, usize)> = inbox.iter().map(|p| (p.0, p.1, p.4)).collect();
    let mut y = vec![0.0f32; hidden];
    for (token, expert, weight, xt, _) in &inbox {
        experts[*expert].forward(xt, &mut y);
        let weighted: Vec<f32> = y.iter().map(|v| v * weight).collect();
        let dest = ep.home(*token);
        if dest != w {
            traffic.combine_bytes += hidden * F32;
            traffic.metadata_bytes += COMBINE_META;
        }
        combine_tx[dest]
            .send(Combine::Pair {
                token: *token,
                expert: *expert,
                y: weighted,
            })
            .expect("worker alive");
    }
    // Step 5: all-to-all #2 done from my side.
    for tx in combine_tx {
        tx.send(Combine::Done).expect("worker alive");
    }
    // ANCHOR_END: ep_experts
    received
}

/// Receives weighted outputs until every worker said Done: (token, expert, y).
fn receive_combined(
    workers: usize,
    c_rx: &mpsc::Receiver<Combine>,
) -> Vec<(usize, usize, Vec<f32>)> {
    let mut back = Vec::new();
    let mut done = 0;
    while done < workers {
        match c_rx.recv().expect("combine channel open") {
            Combine::Done => done += 1,
            Combine::Pair { token, expert, y } => back.push((token, expert, y)),
        }
    }
    back
}

/// Step 6: each of `mine`'s outputs, summed in expert-index order.
fn combine(
    hidden: usize,
    mine: &[usize],
    mut back: Vec<(usize, usize, Vec<f32>)>,
) -> Vec<(usize, Vec<f32>)> {
    // ANCHOR: ep_combine
    // Step 6: add each token's results in expert-index order.
    back.sort_by_key(|b| (b.0, b.1));
    let mut out: Vec<(usize, Vec<f32>)> = mine.iter().map(|&t| (t, vec![0.0f32; hidden])).collect();
    for (token, _, y) in back {
        let slot = &mut out[token - mine[0]].1;
        for (o, v) in slot.iter_mut().zip(&y) {
            *o += v;
        }
    }
    // ANCHOR_END: ep_combine
    out
}

/// The workers' outputs in token order, their routings, logs and total traffic.
fn gather(len: usize, hidden: usize, tokens: usize, results: Vec<WorkerOutput>) -> EpResult {
    let mut output = vec![0.0f32; len];
    let mut routings = Vec::with_capacity(tokens);
    let mut logs = Vec::new();
    let mut traffic = Traffic::default();
    for (out, r, log) in results {
        for (t, y) in out {
            output[t * hidden..(t + 1) * hidden].copy_from_slice(&y);
        }
        routings.extend(r);
        traffic.local_pairs += log.traffic.local_pairs;
        traffic.remote_pairs += log.traffic.remote_pairs;
        traffic.dispatch_bytes += log.traffic.dispatch_bytes;
        traffic.combine_bytes += log.traffic.combine_bytes;
        traffic.metadata_bytes += log.traffic.metadata_bytes;
        logs.push(log);
    }
    EpResult {
        output,
        routings,
        workers: logs,
        traffic,
    }
}

/// The text's setting: 2 workers, 4 experts, 6 tokens (top-2, hidden 8, intermediate 16).
pub const WORKERS: usize = 2;
pub const EXPERTS: usize = 4;
pub const TOKENS: usize = 6;
pub const HIDDEN: usize = 8;
pub const K: usize = 2;

/// The example's layer and tokens (seeded).
pub fn text_example() -> (OwnedMoe, Vec<f32>) {
    let moe = OwnedMoe::random(EXPERTS, HIDDEN, 16, 42);
    // A router-shaped [TOKENS, HIDDEN] draw of N(0, 1) serves as the token batch.
    let x = OwnedMoe::random(TOKENS, HIDDEN, 1, 43).router;
    (moe, x)
}

/// The example as the book prints it: who holds what, which pair goes where, the bytes.
pub fn render_markdown(r: &EpResult, max_abs_diff: f32) -> String {
    let mut s = String::from("```text\n");
    for w in &r.workers {
        let toks: Vec<String> = w.tokens.iter().map(|t| format!("T{t}")).collect();
        let exps: Vec<String> = w.experts.iter().map(|e| format!("E{e}")).collect();
        s.push_str(&format!(
            "worker {}: tokens {}  experts {}\n",
            w.worker,
            toks.join(" "),
            exps.join(" ")
        ));
    }
    s.push_str("routing and all-to-all #1 (dispatch):\n");
    let per_worker = TOKENS.div_ceil(r.workers.len());
    for (t, rt) in r.routings.iter().enumerate() {
        let home = t / per_worker;
        let parts: Vec<String> = rt
            .experts
            .iter()
            .zip(&rt.weights)
            .map(|(&e, p)| {
                let dest = owner(e, EXPERTS, r.workers.len());
                let how = if dest == home {
                    "local".to_string()
                } else {
                    format!("worker {home} -> worker {dest}")
                };
                format!("E{e} p={p:.3} ({how})")
            })
            .collect();
        s.push_str(&format!("  T{t}: {}\n", parts.join(", ")));
    }
    let tr = &r.traffic;
    s.push_str(&format!(
        "pairs: {} local, {} remote\nall-to-all #1 moved {} bytes of activations, all-to-all #2 {} bytes, plus {} bytes of ids and weights\n",
        tr.local_pairs, tr.remote_pairs, tr.dispatch_bytes, tr.combine_bytes, tr.metadata_bytes
    ));
    s.push_str(&format!(
        "max |expert-parallel - single worker| = {max_abs_diff:e}\n```\n"
    ));
    s
}

/// The text's example run both ways: expert-parallel over two workers, and the
/// single-worker bucketed layer, with the largest difference between their outputs.
pub fn text_example_compared() -> (EpResult, f32) {
    let (moe, x) = text_example();
    let (router, experts) = (moe.router(), moe.experts());
    let ep = expert_parallel(&x, HIDDEN, &router, &experts, K, true, WORKERS);
    let (single, _) = super::layer::moe_bucketed(&x, HIDDEN, &router, &experts, K, true);
    let diff = ep
        .output
        .iter()
        .zip(&single)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    (ep, diff)
}
