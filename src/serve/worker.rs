//! The worker: one thread owns the model and runs the queued jobs in arrival order, each
//! through chapter 8's budgeted loop ([`generate_with_budget`]) driving a [`Stepper`], so a
//! greedy answer is the one `anatomy generate --chat` gives. Each token becomes an
//! [`Event`] on the job's channel; a closed channel (the client left) ends the job before
//! the next token, and the job's KV cache goes with its stepper.

use crate::chat::thinking::{ThinkingBudget, generate_with_budget};
use crate::error::{Error, Result};
use crate::qwen3::{Model, Stepper, Trace};
use crate::serve::ServeOptions;
use crate::serve::api::{ApiError, Job, ModelInfo};
use crate::serve::frame::{self, Frame, TokenLogprob};
use crate::serve::prompt::PromptFormat;
use crate::serve::text::StreamText;
use crate::tokenizer::Tokenizer;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use tokio::sync::mpsc;

/// Events buffered per job before the worker waits for the client to read.
const EVENT_BUFFER: usize = 64;

/// One step of a job as the HTTP layer sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Token(TokenEvent),
    /// Text held back until the end (a partial character or stop string that never
    /// completed).
    Tail(String),
    Done(Finish),
    Failed(ApiError),
}

/// A generated (or budget-injected) token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenEvent {
    pub id: u32,
    /// Text that became showable with this token (may be empty).
    pub delta: String,
    pub logprob: Option<TokenLogprob>,
    pub frame: Option<Frame>,
}

/// Why and how a job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finish {
    /// `"stop"` (end of sequence or a stop string) or `"length"` (`max_tokens`).
    pub reason: &'static str,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Whether the thinking budget cut the reasoning.
    pub budget_cut: bool,
}

struct Submission {
    job: Job,
    events: mpsc::Sender<Event>,
}

/// The handle the HTTP layer holds.
pub struct Worker {
    pub info: ModelInfo,
    /// The tokenizer and chat template, shared with the thread.
    pub format: Arc<PromptFormat>,
    queue: SyncSender<Submission>,
}

impl Worker {
    /// Starts the thread and waits until the model is loaded (a load error is returned
    /// here, before any port is bound).
    pub fn start(opts: &ServeOptions) -> Result<Worker> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (queue, jobs) = std::sync::mpsc::sync_channel(opts.queue);
        let opts = opts.clone();
        std::thread::Builder::new()
            .name("anatomy-worker".into())
            .spawn(move || {
                if let Err(e) = load_and_run(&opts, &ready_tx, jobs) {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| Error::Invalid(format!("cannot start the worker thread: {e}")))?;
        let (info, format) = ready_rx
            .recv()
            .map_err(|_| Error::Invalid("the worker thread ended while loading".into()))??;
        Ok(Worker {
            info,
            format,
            queue,
        })
    }

    /// Queues a job; its events arrive on the returned channel. A full queue is a 503.
    pub fn submit(&self, job: Job) -> std::result::Result<mpsc::Receiver<Event>, ApiError> {
        let (events, rx) = mpsc::channel(EVENT_BUFFER);
        match self.queue.try_send(Submission { job, events }) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(_)) => Err(ApiError::new(
                503,
                "server_error",
                "server_busy",
                "the request queue is full; retry later".into(),
            )),
            Err(TrySendError::Disconnected(_)) => Err(ApiError::new(
                500,
                "server_error",
                "worker_gone",
                "the model worker has stopped".into(),
            )),
        }
    }
}

type Ready = std::sync::mpsc::Sender<Result<(ModelInfo, Arc<PromptFormat>)>>;

/// The worker thread: load, report ready, then run jobs until the server goes away.
fn load_and_run(opts: &ServeOptions, ready: &Ready, jobs: Receiver<Submission>) -> Result<()> {
    let format = Arc::new(PromptFormat::open(&opts.model, opts.vocab.as_deref())?);
    let tok = format.tokenizer();
    let (config, file) = crate::qwen3::open(&opts.model)?;
    let model = Model::new(config, &file)?;
    let c = &model.config;
    let info = ModelInfo {
        id: model_id(&opts.model),
        max_context: opts.max_context.min(c.max_position_embeddings),
        layers: c.num_hidden_layers,
        experts: c.num_experts,
    };
    let _ = ready.send(Ok((info, Arc::clone(&format))));
    for Submission { job, events } in jobs {
        if events.is_closed() {
            continue;
        }
        let run = std::panic::AssertUnwindSafe(|| run_job(&model, tok, &job, &events));
        let last = match std::panic::catch_unwind(run) {
            Ok(Ok(Some(finish))) => Event::Done(finish),
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => Event::Failed(internal(e.to_string())),
            Err(_) => Event::Failed(internal("the forward pass panicked".into())),
        };
        let _ = events.blocking_send(last);
    }
    Ok(())
}

fn internal(message: String) -> ApiError {
    ApiError::new(500, "server_error", "internal_error", message)
}

/// The name clients pass as `model`: MODEL's file or directory name.
pub fn model_id(path: &std::path::Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Why a job stopped before the loop ended it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Halt {
    StopString,
    ClientGone,
}

/// A job's state between tokens.
struct Emitter<'a> {
    tok: &'a Tokenizer,
    job: &'a Job,
    events: &'a mpsc::Sender<Event>,
    eos: &'a [u32],
    /// Generated ids handled so far (injected ones included).
    done: usize,
    /// Ids whose text is shown (end-of-sequence ids are not).
    text_ids: Vec<u32>,
    text: StreamText,
    probs: Vec<f32>,
    /// The budget injected its early-stop text.
    cut: bool,
    halt: Option<Halt>,
}

impl Emitter<'_> {
    fn send(&mut self, event: Event) -> Result<()> {
        if self.events.blocking_send(event).is_err() {
            self.halt = Some(Halt::ClientGone);
            return Err(Error::Invalid("the client went away".into()));
        }
        Ok(())
    }

    /// Sends token `id`; `chosen` holds the step's logits and trace when a step chose it.
    fn token(&mut self, id: u32, chosen: Option<(&[f32], Option<&Trace>)>) -> Result<()> {
        self.done += 1;
        if !self.eos.contains(&id) {
            self.text_ids.push(id);
        }
        let decoded = self.tok.decode(&self.text_ids)?;
        let update = self.text.update(decoded, &self.job.stop, false);
        let (mut logprob, mut frame) = (None, None);
        if let Some((logits, trace)) =
            chosen.filter(|_| self.job.anatomy || self.job.logprobs.is_some())
        {
            frame::probabilities(logits, &mut self.probs);
            logprob = self
                .job
                .logprobs
                .map(|k| frame::logprob(&self.probs, id, k));
            frame = trace.map(|t| frame::frame(self.tok, id, &self.probs, t));
        } else if self.job.anatomy && chosen.is_none() {
            frame = Some(frame::injected(self.tok, id));
        }
        self.send(Event::Token(TokenEvent {
            id,
            delta: update.delta,
            logprob,
            frame,
        }))?;
        if update.stopped {
            self.halt = Some(Halt::StopString);
            return Err(Error::Invalid("stop string".into()));
        }
        Ok(())
    }

    /// Sends the tokens of `generated` past those already handled: the budget's injection.
    fn injected(&mut self, generated: &[u32]) -> Result<()> {
        for &id in generated.get(self.done..).unwrap_or(&[]).to_vec().iter() {
            self.cut = true;
            self.token(id, None)?;
        }
        Ok(())
    }
}

/// A budget that never cuts: the loop then is plain generation until a stop id.
fn no_budget() -> ThinkingBudget {
    ThinkingBudget {
        budget: usize::MAX,
        think_start: u32::MAX,
        think_end: u32::MAX,
        early_stop_ids: Vec::new(),
    }
}

/// Runs one job; `None` when the client left (nothing more to send).
fn run_job(
    model: &Model,
    tok: &Tokenizer,
    job: &Job,
    events: &mpsc::Sender<Event>,
) -> Result<Option<Finish>> {
    let prompt = &job.prompt;
    let mut step = Stepper::new(model, prompt.len() + job.max_tokens, job.sampling)?;
    if job.anatomy {
        step.set_trace(Some(Trace::default()));
    }
    let eos = &model.config.eos_token_ids;
    let mut em = Emitter {
        tok,
        job,
        events,
        eos,
        done: 0,
        text_ids: Vec::new(),
        text: StreamText::default(),
        probs: Vec::new(),
        cut: false,
        halt: None,
    };
    let budget = job.budget.clone().unwrap_or_else(no_budget);
    let result = generate_with_budget(prompt, job.max_tokens, eos, &budget, |context| {
        em.injected(&context[prompt.len()..])?;
        if em.events.is_closed() {
            em.halt = Some(Halt::ClientGone);
            return Err(Error::Invalid("the client went away".into()));
        }
        let id = step.next_token(context)?;
        em.token(id, Some((step.last_logits(), step.trace())))?;
        Ok(id)
    });
    let reason = match (result, em.halt) {
        (_, Some(Halt::ClientGone)) => return Ok(None),
        (_, Some(Halt::StopString)) => "stop",
        (Err(e), None) => return Err(e),
        (Ok(g), None) => {
            if em.injected(&g.ids).is_err() {
                return Ok(None);
            }
            match g.stop {
                crate::chat::thinking::StopReason::StopToken => "stop",
                crate::chat::thinking::StopReason::MaxTokens => "length",
            }
        }
    };
    if em.halt.is_none() {
        let decoded = tok.decode(&em.text_ids)?;
        let rest = em.text.update(decoded, &job.stop, true);
        if !rest.delta.is_empty() && em.send(Event::Tail(rest.delta)).is_err() {
            return Ok(None);
        }
    }
    Ok(Some(Finish {
        reason,
        prompt_tokens: prompt.len(),
        completion_tokens: em.done,
        budget_cut: em.cut,
    }))
}
