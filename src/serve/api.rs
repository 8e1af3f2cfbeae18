//! The request bodies of `POST /v1/chat/completions` and `POST /v1/completions`, checked
//! into a [`Job`] before anything is queued or allocated, and errors in OpenAI's shape
//! (`{"error": {"message", "type", "param", "code"}}`).
//!
//! Extensions beyond OpenAI's fields: `anatomy: true` (each token carries an anatomy frame,
//! see [`crate::serve::frame`]), `thinking_budget: N` (chapter 8's budget cut),
//! `chat_template_kwargs: {"enable_thinking": bool}` and `continue_final_message: true`
//! (as vLLM takes them).
//! A missing or zero `temperature` is greedy decoding, so that the same request always
//! gets the same answer (`anatomy generate`'s default).

use crate::chat::thinking::ThinkingBudget;
use crate::chat::{ChatOptions, Content, Conversation, JsonValue};
use crate::qwen3::Sampling;
use crate::serve::prompt::PromptFormat;
use crate::tokenizer::Tokenizer;

/// Largest `top_logprobs` (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Most stop strings a request may give, and their longest length in bytes.
pub const MAX_STOP: usize = 4;
pub const MAX_STOP_BYTES: usize = 256;

/// An error as the client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `not_found_error`, `server_error`, ….
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 about one field of the request.
    pub fn param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            code: None,
        }
    }

    pub fn new(status: u16, kind: &'static str, code: &'static str, message: String) -> Self {
        ApiError {
            status,
            message,
            kind,
            param: None,
            code: Some(code),
        }
    }

    /// The body: `{"error": {...}}`.
    pub fn body(&self) -> String {
        serde_json::json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
        .to_string()
    }
}

/// Which endpoint a job came from (it decides the response's shape).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// A checked request, ready for the worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub endpoint: Endpoint,
    pub prompt: Vec<u32>,
    /// New tokens at most (early-stop tokens a budget injects count too).
    pub max_tokens: usize,
    pub sampling: Sampling,
    pub stop: Vec<String>,
    pub budget: Option<ThinkingBudget>,
    /// `Some(k)`: report each token's log-probability and the `k` most likely.
    pub logprobs: Option<usize>,
    pub anatomy: bool,
    pub stream: bool,
    pub include_usage: bool,
    /// The prompt leaves the model inside an open `<think>` block.
    pub thinking_open: bool,
}

/// What the checks need to know about the served model.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// The name clients pass as `model`.
    pub id: String,
    /// Positions one request may use.
    pub max_context: usize,
    pub layers: usize,
    /// Experts per MoE layer (0 for a dense model).
    pub experts: usize,
}

type Fields<'a> = &'a [(String, JsonValue)];

/// Parses a body as JSON and checks it is an object.
fn object(body: &[u8]) -> Result<JsonValue, ApiError> {
    let doc: JsonValue = serde_json::from_slice(body)
        .map_err(|e| ApiError::param("body", format!("the body is not valid JSON: {e}")))?;
    match doc {
        JsonValue::Object(_) => Ok(doc),
        _ => Err(ApiError::param("body", "the body must be a JSON object")),
    }
}

fn fields(doc: &JsonValue) -> Fields<'_> {
    match doc {
        JsonValue::Object(f) => f,
        _ => &[],
    }
}

fn get<'a>(f: Fields<'a>, key: &str) -> Option<&'a JsonValue> {
    f.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .filter(|v| !matches!(v, JsonValue::Null))
}

fn number(f: Fields, key: &str) -> Result<Option<f64>, ApiError> {
    match get(f, key) {
        None => Ok(None),
        Some(JsonValue::Int(i)) => Ok(Some(*i as f64)),
        Some(JsonValue::UInt(u)) => Ok(Some(*u as f64)),
        Some(JsonValue::Float(x)) => Ok(Some(*x)),
        Some(_) => Err(ApiError::param(key, format!("`{key}` must be a number"))),
    }
}

/// A non-negative integer field; anything past `usize` is reported as too large by the
/// caller's own bound, so it is kept as `u64::MAX`.
fn count(f: Fields, key: &str) -> Result<Option<u64>, ApiError> {
    match get(f, key) {
        None => Ok(None),
        Some(JsonValue::UInt(u)) => Ok(Some(*u)),
        Some(JsonValue::Int(i)) if *i >= 0 => Ok(Some(*i as u64)),
        Some(JsonValue::BigInt(d)) if !d.starts_with('-') => Ok(Some(u64::MAX)),
        Some(_) => Err(ApiError::param(
            key,
            format!("`{key}` must be a non-negative integer"),
        )),
    }
}

fn flag(f: Fields, key: &str) -> Result<bool, ApiError> {
    match get(f, key) {
        None => Ok(false),
        Some(JsonValue::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::param(
            key,
            format!("`{key}` must be true or false"),
        )),
    }
}

fn check_model(f: Fields, info: &ModelInfo) -> Result<(), ApiError> {
    match get(f, "model") {
        None => Err(ApiError::param("model", "`model` is required")),
        Some(JsonValue::Str(m)) if *m == info.id => Ok(()),
        Some(JsonValue::Str(m)) => Err(ApiError {
            param: Some("model".into()),
            ..ApiError::new(
                404,
                "invalid_request_error",
                "model_not_found",
                format!(
                    "the model `{m}` does not exist; this server runs `{}`",
                    info.id
                ),
            )
        }),
        Some(_) => Err(ApiError::param("model", "`model` must be a string")),
    }
}

/// Greedy without a temperature or at 0 (OpenAI's "most deterministic"), else nucleus
/// sampling with `top_p` (default 1) and `seed` (default 0).
fn sampling(f: Fields) -> Result<Sampling, ApiError> {
    let temperature = number(f, "temperature")?;
    let top_p = number(f, "top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::param("top_p", "`top_p` must be in (0, 1]"));
    }
    let seed = match get(f, "seed") {
        None => 0,
        Some(JsonValue::Int(i)) => *i as u64,
        Some(JsonValue::UInt(u)) => *u,
        Some(_) => return Err(ApiError::param("seed", "`seed` must be an integer")),
    };
    match temperature {
        None => Ok(Sampling::Greedy),
        Some(0.0) => Ok(Sampling::Greedy),
        Some(t) if t.is_finite() && t > 0.0 && t <= 2.0 => Ok(Sampling::TopP {
            temperature: t as f32,
            top_p: top_p as f32,
            seed,
        }),
        Some(_) => Err(ApiError::param(
            "temperature",
            "`temperature` must be between 0 and 2",
        )),
    }
}

fn stop_strings(f: Fields) -> Result<Vec<String>, ApiError> {
    let stop = match get(f, "stop") {
        None => Vec::new(),
        Some(JsonValue::Str(s)) => vec![s.clone()],
        Some(JsonValue::Array(items)) => items
            .iter()
            .map(|v| match v {
                JsonValue::Str(s) => Ok(s.clone()),
                _ => Err(ApiError::param("stop", "`stop` must be strings")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ApiError::param(
                "stop",
                "`stop` must be a string or an array",
            ));
        }
    };
    if stop.len() > MAX_STOP
        || stop
            .iter()
            .any(|s| s.is_empty() || s.len() > MAX_STOP_BYTES)
    {
        return Err(ApiError::param(
            "stop",
            format!("at most {MAX_STOP} non-empty stop strings of at most {MAX_STOP_BYTES} bytes"),
        ));
    }
    Ok(stop)
}

/// `max_tokens` (or `max_completion_tokens`) against the positions left after the prompt;
/// absent, all of them.
fn max_tokens(f: Fields, prompt: usize, info: &ModelInfo) -> Result<usize, ApiError> {
    let (key, asked) = match count(f, "max_completion_tokens")? {
        Some(n) => ("max_completion_tokens", Some(n)),
        None => ("max_tokens", count(f, "max_tokens")?),
    };
    let room = info.max_context.saturating_sub(prompt);
    if room == 0 {
        return Err(ApiError {
            param: Some("messages".into()),
            ..ApiError::new(
                400,
                "invalid_request_error",
                "context_length_exceeded",
                format!(
                    "the prompt has {prompt} tokens; this server allows {} positions per request",
                    info.max_context
                ),
            )
        });
    }
    match asked {
        None => Ok(room),
        Some(0) => Err(ApiError::param(key, format!("`{key}` must be at least 1"))),
        Some(n) if n > room as u64 => Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::param(
                key,
                format!(
                    "`{key}` = {n} is more than the {room} positions left after a prompt of {prompt} tokens (at most {} per request)",
                    info.max_context
                ),
            )
        }),
        Some(n) => Ok(n as usize),
    }
}

/// `logprobs` and `top_logprobs` of the chat endpoint.
fn chat_logprobs(f: Fields) -> Result<Option<usize>, ApiError> {
    let top = count(f, "top_logprobs")?;
    if !flag(f, "logprobs")? {
        return match top {
            Some(_) => Err(ApiError::param(
                "top_logprobs",
                "`top_logprobs` needs `logprobs: true`",
            )),
            None => Ok(None),
        };
    }
    match top.unwrap_or(0) {
        k if k > MAX_TOP_LOGPROBS as u64 => Err(ApiError::param(
            "top_logprobs",
            format!("`top_logprobs` must be at most {MAX_TOP_LOGPROBS}"),
        )),
        k => Ok(Some(k as usize)),
    }
}

/// The budget of `thinking_budget`, with the model's own `<think>` and `</think>` ids.
fn budget(f: Fields, tok: &Tokenizer) -> Result<Option<ThinkingBudget>, ApiError> {
    match count(f, "thinking_budget")? {
        None => Ok(None),
        Some(n) => ThinkingBudget::for_tokenizer(n.min(usize::MAX as u64) as usize, tok)
            .map(Some)
            .map_err(|e| ApiError::param("thinking_budget", e.to_string())),
    }
}

fn stream_options(f: Fields) -> Result<(bool, bool), ApiError> {
    let stream = flag(f, "stream")?;
    let usage = match get(f, "stream_options") {
        None => false,
        Some(o @ JsonValue::Object(_)) => flag(fields(o), "include_usage")?,
        Some(_) => return Err(ApiError::param("stream_options", "must be an object")),
    };
    Ok((stream, usage))
}

fn only_one_choice(f: Fields) -> Result<(), ApiError> {
    match count(f, "n")? {
        None | Some(1) => Ok(()),
        Some(_) => Err(ApiError::param(
            "n",
            "this server returns one choice (`n` = 1)",
        )),
    }
}

fn enable_thinking(f: Fields) -> Result<Option<bool>, ApiError> {
    match get(f, "chat_template_kwargs") {
        None => Ok(None),
        Some(o @ JsonValue::Object(_)) => match get(fields(o), "enable_thinking") {
            None => Ok(None),
            Some(JsonValue::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(ApiError::param(
                "chat_template_kwargs",
                "`enable_thinking` must be true or false",
            )),
        },
        Some(_) => Err(ApiError::param("chat_template_kwargs", "must be an object")),
    }
}

/// Whether a rendered prompt leaves an open `<think>` block.
fn opens_thinking(prompt: &str) -> bool {
    match (prompt.rfind("<think>"), prompt.rfind("</think>")) {
        (Some(open), Some(close)) => open > close,
        (Some(_), None) => true,
        _ => false,
    }
}

// ANCHOR: continue_final
/// vLLM's `continue_final_message`: the last message is an assistant turn the model goes on
/// writing, its text placed after the assistant's header (an opening `<think>` makes the
/// reply start inside a think block). It is taken out of `conversation`; without the flag
/// there is nothing to continue.
fn final_prefill(f: Fields, conversation: &mut Conversation) -> Result<String, ApiError> {
    if !flag(f, "continue_final_message")? {
        return Ok(String::new());
    }
    let refuse = || {
        ApiError::param(
            "continue_final_message",
            "the last message must be an assistant message with text content to continue",
        )
    };
    match conversation.messages.last() {
        Some(m) if m.role == "assistant" && m.tool_calls.is_empty() => match &m.content {
            Content::Text(t) => {
                let t = t.clone();
                conversation.messages.pop();
                Ok(t)
            }
            _ => Err(refuse()),
        },
        _ => Err(refuse()),
    }
}
// ANCHOR_END: continue_final

/// `POST /v1/chat/completions`: the messages rendered with the model's chat template (as
/// `anatomy generate --chat` renders its one user turn) and every option checked.
pub fn chat_job(body: &[u8], info: &ModelInfo, format: &PromptFormat) -> Result<Job, ApiError> {
    let doc = object(body)?;
    let f = fields(&doc);
    check_model(f, info)?;
    only_one_choice(f)?;
    let mut conversation = Conversation::from_json(&doc, "request")
        .map_err(|e| ApiError::param("messages", e.to_string()))?;
    let prefill = final_prefill(f, &mut conversation)?;
    let opts = ChatOptions {
        add_generation_prompt: true,
        enable_thinking: enable_thinking(f)?,
    };
    if !format.has_chat_template() {
        return Err(ApiError {
            param: Some("model".into()),
            ..ApiError::new(
                400,
                "invalid_request_error",
                "no_chat_template",
                format!(
                    "`{}` carries no chat template (a base model): chat needs one; \
                     send plain text to /v1/completions instead",
                    info.id
                ),
            )
        });
    }
    let (text, prompt) = format
        .chat(&conversation, &opts, &prefill)
        .map_err(|e| ApiError::param("messages", e.to_string()))?;
    let tok = format.tokenizer();
    let (stream, include_usage) = stream_options(f)?;
    Ok(Job {
        endpoint: Endpoint::Chat,
        max_tokens: max_tokens(f, prompt.len(), info)?,
        prompt,
        sampling: sampling(f)?,
        stop: stop_strings(f)?,
        budget: budget(f, tok)?,
        logprobs: chat_logprobs(f)?,
        anatomy: flag(f, "anatomy")?,
        stream,
        include_usage,
        thinking_open: opens_thinking(&text),
    })
}

/// `POST /v1/completions`: a prompt string (or an array holding one) continued as is
/// (after a GGUF file's BOS, as `anatomy generate` does).
pub fn completion_job(
    body: &[u8],
    info: &ModelInfo,
    format: &PromptFormat,
) -> Result<Job, ApiError> {
    let doc = object(body)?;
    let f = fields(&doc);
    check_model(f, info)?;
    only_one_choice(f)?;
    let text = match get(f, "prompt") {
        Some(JsonValue::Str(s)) => s.as_str(),
        Some(JsonValue::Array(items)) => match items.as_slice() {
            [JsonValue::Str(s)] => s.as_str(),
            _ => return Err(ApiError::param("prompt", "one prompt string per request")),
        },
        _ => return Err(ApiError::param("prompt", "`prompt` must be a string")),
    };
    let prompt = format
        .text(text)
        .map_err(|e| ApiError::param("prompt", e.to_string()))?;
    if prompt.is_empty() {
        return Err(ApiError::param("prompt", "`prompt` is empty"));
    }
    let logprobs = match count(f, "logprobs")? {
        Some(k) if k > 5 => {
            return Err(ApiError::param("logprobs", "`logprobs` must be at most 5"));
        }
        k => k.map(|k| k as usize),
    };
    let (stream, include_usage) = stream_options(f)?;
    Ok(Job {
        endpoint: Endpoint::Completion,
        max_tokens: match get(f, "max_tokens") {
            // The completions endpoint's default is 16 tokens.
            None => max_tokens(f, prompt.len(), info).map(|room| room.min(16))?,
            Some(_) => max_tokens(f, prompt.len(), info)?,
        },
        prompt,
        sampling: sampling(f)?,
        stop: stop_strings(f)?,
        budget: None,
        logprobs,
        anatomy: flag(f, "anatomy")?,
        stream,
        include_usage,
        thinking_open: false,
    })
}
