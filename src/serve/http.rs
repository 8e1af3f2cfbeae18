//! The HTTP layer: axum routes, request bodies read with a size limit, answers shaped as
//! OpenAI's (whole, or streamed as server-sent events ending in `data: [DONE]`), and the
//! chat page bundled into the binary.

use crate::serve::api::{self, ApiError, Endpoint, Job};
use crate::serve::frame::{Frame, TokenLogprob, token_text};
use crate::serve::prompt::PromptFormat;
use crate::serve::text::ReasoningSplit;
use crate::serve::worker::{Event, Finish, TokenEvent, Worker};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc::Receiver;

/// Largest request body read.
pub const MAX_BODY: usize = 1 << 20;

const PAGE_HTML: &str = include_str!("page/index.html");
const PAGE_JS: &str = include_str!("page/app.js");
const PAGE_CSS: &str = include_str!("page/style.css");

struct AppState {
    worker: Worker,
    next_id: AtomicU64,
    created: u64,
}

type Shared = State<Arc<AppState>>;

/// The routes over a started worker.
pub fn router(worker: Worker) -> Router {
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let state = Arc::new(AppState {
        worker,
        next_id: AtomicU64::new(1),
        created,
    });
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", PAGE_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript", PAGE_JS) }),
        )
        .route("/style.css", get(|| async { asset("text/css", PAGE_CSS) }))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .fallback(|| async {
            error(&ApiError::new(
                404,
                "not_found_error",
                "not_found",
                "no such endpoint".into(),
            ))
        })
        .method_not_allowed_fallback(|| async {
            error(&ApiError::new(
                405,
                "invalid_request_error",
                "method_not_allowed",
                "this endpoint does not take that method".into(),
            ))
        })
        .with_state(state)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn error(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, e.body())
}

async fn models(State(s): Shared) -> Response {
    let info = &s.worker.info;
    let body = json!({"object": "list", "data": [{
        "id": info.id, "object": "model", "created": s.created, "owned_by": "llm-anatomy",
        "max_context": info.max_context, "layers": info.layers, "experts": info.experts,
    }]});
    json_response(StatusCode::OK, body.to_string())
}

async fn chat(state: Shared, body: Body) -> Response {
    handle(state, body, Endpoint::Chat).await
}

async fn completions(state: Shared, body: Body) -> Response {
    handle(state, body, Endpoint::Completion).await
}

async fn handle(State(s): Shared, body: Body, endpoint: Endpoint) -> Response {
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return error(&ApiError::new(
            413,
            "invalid_request_error",
            "request_too_large",
            format!("the request body is larger than {MAX_BODY} bytes"),
        ));
    };
    let (info, format) = (&s.worker.info, &s.worker.format);
    let job = match endpoint {
        Endpoint::Chat => api::chat_job(&bytes, info, format),
        Endpoint::Completion => api::completion_job(&bytes, info, format),
    };
    let job = match job {
        Ok(job) => job,
        Err(e) => return error(&e),
    };
    let rx = match s.worker.submit(job.clone()) {
        Ok(rx) => rx,
        Err(e) => return error(&e),
    };
    let n = s.next_id.fetch_add(1, Ordering::Relaxed);
    let reply = Reply::new(&job, n, s.created, info.id.clone(), Arc::clone(format));
    if job.stream {
        stream(reply, rx)
    } else {
        whole(reply, rx).await
    }
}

/// Builds the response objects of one request from its events.
struct Reply {
    endpoint: Endpoint,
    id: String,
    created: u64,
    model: String,
    format: Arc<PromptFormat>,
    split: ReasoningSplit,
    anatomy: bool,
    logprobs: bool,
    include_usage: bool,
    shown: String,
    content: String,
    reasoning: String,
    token_logprobs: Vec<Value>,
    frames: Vec<Frame>,
}

impl Reply {
    fn new(job: &Job, n: u64, created: u64, model: String, format: Arc<PromptFormat>) -> Self {
        let prefix = match job.endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion => "cmpl",
        };
        Reply {
            endpoint: job.endpoint,
            id: format!("{prefix}-{n}"),
            created,
            model,
            format,
            split: ReasoningSplit::new(job.thinking_open),
            anatomy: job.anatomy,
            logprobs: job.logprobs.is_some(),
            include_usage: job.include_usage,
            shown: String::new(),
            content: String::new(),
            reasoning: String::new(),
            token_logprobs: Vec::new(),
            frames: Vec::new(),
        }
    }

    /// Takes new text; returns (reasoning delta, answer delta).
    fn absorb(&mut self, delta: &str) -> (String, String) {
        self.shown.push_str(delta);
        let (r, a) = match self.endpoint {
            Endpoint::Chat => self.split.deltas(&self.shown),
            Endpoint::Completion => (String::new(), delta.to_string()),
        };
        self.reasoning.push_str(&r);
        self.content.push_str(&a);
        (r, a)
    }

    fn logprob_entry(&self, lp: &TokenLogprob) -> Value {
        let entry = |id: u32, logprob: f32| {
            let tok = self.format.tokenizer();
            let text = token_text(tok, id);
            let bytes = tok.token_bytes(id).map(<[u8]>::to_vec).unwrap_or_default();
            json!({"token": text, "logprob": logprob, "bytes": bytes})
        };
        let mut e = entry(lp.id, lp.logprob);
        e["top_logprobs"] = lp.top.iter().map(|&(i, l)| entry(i, l)).collect();
        e
    }

    fn usage(f: &Finish) -> Value {
        json!({"prompt_tokens": f.prompt_tokens, "completion_tokens": f.completion_tokens,
               "total_tokens": f.prompt_tokens + f.completion_tokens})
    }

    /// One streamed chunk with `choice` as its only choice.
    fn chunk(&self, choice: Value) -> Value {
        let object = match self.endpoint {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completion => "text_completion",
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model,
               "choices": [choice]})
    }

    fn delta_choice(&self, r: &str, a: &str, logprobs: Value) -> Value {
        match self.endpoint {
            Endpoint::Chat => {
                let mut delta = json!({});
                if !r.is_empty() {
                    delta["reasoning_content"] = json!(r);
                }
                if !a.is_empty() {
                    delta["content"] = json!(a);
                }
                json!({"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": null})
            }
            Endpoint::Completion => {
                json!({"index": 0, "text": a, "logprobs": logprobs, "finish_reason": null})
            }
        }
    }

    /// The streamed form of one event (`None` when it shows nothing new).
    fn stream_token(&mut self, t: TokenEvent) -> Option<Value> {
        let (r, a) = self.absorb(&t.delta);
        let lp = t.logprob.as_ref().map(|lp| self.logprob_entry(lp));
        if r.is_empty() && a.is_empty() && lp.is_none() && t.frame.is_none() {
            return None;
        }
        let logprobs = match (self.endpoint, lp) {
            (_, None) => Value::Null,
            (Endpoint::Chat, Some(e)) => json!({"content": [e]}),
            (Endpoint::Completion, Some(e)) => completion_logprobs(&[e]),
        };
        let mut chunk = self.chunk(self.delta_choice(&r, &a, logprobs));
        if let Some(frame) = t.frame {
            chunk["anatomy"] = json!(frame);
        }
        Some(chunk)
    }

    fn stream_finish(&self, f: &Finish) -> Vec<Value> {
        let mut last = self.chunk(match self.endpoint {
            Endpoint::Chat => {
                json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": f.reason})
            }
            Endpoint::Completion => {
                json!({"index": 0, "text": "", "logprobs": null, "finish_reason": f.reason})
            }
        });
        last["budget_cut"] = json!(f.budget_cut);
        let mut out = vec![last];
        if self.include_usage {
            let mut usage = self.chunk(Value::Null);
            usage["choices"] = json!([]);
            usage["usage"] = Reply::usage(f);
            out.push(usage);
        }
        out
    }

    fn take_token(&mut self, t: TokenEvent) {
        self.absorb(&t.delta);
        if let Some(lp) = &t.logprob {
            let e = self.logprob_entry(lp);
            self.token_logprobs.push(e);
        }
        self.frames.extend(t.frame);
    }

    /// The whole (non-streamed) response.
    fn whole(&self, f: &Finish) -> Value {
        let mut body = match self.endpoint {
            Endpoint::Chat => {
                let mut message = json!({"role": "assistant", "content": self.content});
                if !self.reasoning.is_empty() {
                    message["reasoning_content"] = json!(self.reasoning);
                }
                let logprobs = match self.logprobs {
                    true => json!({"content": self.token_logprobs}),
                    false => Value::Null,
                };
                json!({"id": self.id, "object": "chat.completion", "created": self.created,
                       "model": self.model, "choices": [{"index": 0, "message": message,
                       "logprobs": logprobs, "finish_reason": f.reason}]})
            }
            Endpoint::Completion => {
                let logprobs = match self.logprobs {
                    true => completion_logprobs(&self.token_logprobs),
                    false => Value::Null,
                };
                json!({"id": self.id, "object": "text_completion", "created": self.created,
                       "model": self.model, "choices": [{"index": 0, "text": self.content,
                       "logprobs": logprobs, "finish_reason": f.reason}]})
            }
        };
        body["usage"] = Reply::usage(f);
        body["budget_cut"] = json!(f.budget_cut);
        if self.anatomy {
            body["anatomy"] = json!(self.frames);
        }
        body
    }
}

/// The legacy completions `logprobs` object from chat-style entries.
fn completion_logprobs(entries: &[Value]) -> Value {
    let tokens: Vec<&Value> = entries.iter().map(|e| &e["token"]).collect();
    let lps: Vec<&Value> = entries.iter().map(|e| &e["logprob"]).collect();
    let tops: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut m = serde_json::Map::new();
            for t in e["top_logprobs"].as_array().into_iter().flatten() {
                let key = t["token"].as_str().unwrap_or_default().to_string();
                m.entry(key).or_insert_with(|| t["logprob"].clone());
            }
            Value::Object(m)
        })
        .collect();
    json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops})
}

async fn whole(mut reply: Reply, mut rx: Receiver<Event>) -> Response {
    while let Some(event) = rx.recv().await {
        match event {
            Event::Token(t) => reply.take_token(t),
            Event::Tail(text) => {
                reply.absorb(&text);
            }
            Event::Done(f) => return json_response(StatusCode::OK, reply.whole(&f).to_string()),
            Event::Failed(e) => return error(&e),
        }
    }
    error(&ApiError::new(
        500,
        "server_error",
        "worker_gone",
        "the model worker stopped before the answer was complete".into(),
    ))
}

fn sse(values: impl IntoIterator<Item = Value>) -> Bytes {
    let mut out = String::new();
    for v in values {
        out.push_str("data: ");
        out.push_str(&v.to_string());
        out.push_str("\n\n");
    }
    Bytes::from(out)
}

/// Streams the answer as server-sent events. Dropping the body (the client left) drops
/// `rx`, which the worker notices before its next token.
fn stream(reply: Reply, rx: Receiver<Event>) -> Response {
    let first = match reply.endpoint {
        Endpoint::Chat => Some(sse([reply.chunk(json!({"index": 0,
            "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}))])),
        Endpoint::Completion => None,
    };
    let state = (reply, rx, first, false);
    let events =
        futures_util::stream::unfold(state, |(mut reply, mut rx, first, done)| async move {
            if let Some(bytes) = first {
                return Some((
                    Ok::<_, std::convert::Infallible>(bytes),
                    (reply, rx, None, false),
                ));
            }
            if done {
                return None;
            }
            loop {
                let bytes = match rx.recv().await {
                    Some(Event::Token(t)) => match reply.stream_token(t) {
                        Some(chunk) => sse([chunk]),
                        None => continue,
                    },
                    Some(Event::Tail(text)) => {
                        let (r, a) = reply.absorb(&text);
                        sse([reply.chunk(reply.delta_choice(&r, &a, Value::Null))])
                    }
                    Some(Event::Done(f)) => {
                        let mut b = sse(reply.stream_finish(&f)).to_vec();
                        b.extend_from_slice(b"data: [DONE]\n\n");
                        return Some((Ok(Bytes::from(b)), (reply, rx, None, true)));
                    }
                    Some(Event::Failed(e)) => {
                        let mut b = format!("data: {}\n\n", e.body()).into_bytes();
                        b.extend_from_slice(b"data: [DONE]\n\n");
                        return Some((Ok(Bytes::from(b)), (reply, rx, None, true)));
                    }
                    None => return None,
                };
                return Some((Ok(bytes), (reply, rx, None, false)));
            }
        });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(events))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
