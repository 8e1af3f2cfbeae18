//! `anatomy serve` — the engine behind an OpenAI-compatible HTTP API and a chat page that
//! shows the model's insides as it writes (chapter 8's serving section).
//!
//! One model, one worker thread: requests wait in a bounded first-in-first-out queue and
//! run one after another, each with its own KV cache sized to its prompt plus `max_tokens`
//! and freed when it ends. A client that goes away is noticed between two tokens and its
//! request stops there. Everything a request asks for is checked before it is queued, so a
//! bad request costs a 4xx and no allocation.
//!
//! - [`api`]: the request bodies (OpenAI's chat and completions shapes, plus `anatomy` and
//!   `thinking_budget`) checked into a [`api::Job`], and errors in OpenAI's shape.
//! - [`worker`]: the thread that owns the model and turns a job into [`worker::Event`]s.
//! - [`frame`]: what each token carries: log-probabilities and the anatomy frame (routing,
//!   sink share, top-5).
//! - [`text`]: streaming text: incremental decoding, stop strings, the reasoning split.
//! - [`prompt`]: a request's text as the model's ids (its tokenizer and chat template).
//! - [`http`]: the axum routes, server-sent events and the bundled page.

pub mod api;
pub mod frame;
pub mod http;
pub mod prompt;
pub mod text;
pub mod worker;

use crate::error::{Error, Result};
use std::net::SocketAddr;
use std::path::PathBuf;

/// What `anatomy serve` was asked to run.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// A Hugging Face directory or a GGUF file.
    pub model: PathBuf,
    /// A tokenizer file to use instead of the model's own.
    pub vocab: Option<PathBuf>,
    pub addr: SocketAddr,
    /// Requests that may wait for the worker; one more is refused with 503.
    pub queue: usize,
    /// Positions one request may use (prompt + new tokens), at most the model's own limit:
    /// it bounds each request's KV cache.
    pub max_context: usize,
}

/// Loads the model, binds `opts.addr` and serves until the process ends. `on_ready` sees
/// the bound address (the port is chosen by the system when `opts.addr` has port 0).
pub fn serve(opts: &ServeOptions, on_ready: impl FnOnce(SocketAddr)) -> Result<()> {
    let worker = worker::Worker::start(opts)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| Error::Invalid(format!("cannot start the HTTP runtime: {e}")))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(opts.addr)
            .await
            .map_err(|e| Error::Invalid(format!("cannot listen on {}: {e}", opts.addr)))?;
        let bound = listener
            .local_addr()
            .map_err(|e| Error::Invalid(format!("listening on {}: {e}", opts.addr)))?;
        on_ready(bound);
        axum::serve(listener, http::router(worker))
            .await
            .map_err(|e| Error::Invalid(format!("serving on {bound}: {e}")))
    })
}
