//! `anatomy serve` over the wire: a server on a free loopback port, spoken to in plain
//! HTTP/1.1 over a `TcpStream`. Greedy answers must equal `anatomy generate --chat` token
//! for token, streamed text must equal the whole answer, bad requests must get OpenAI-shaped
//! 4xx errors, and a client that leaves mid-stream must not stop the next one.

use crate::common::{anatomy, ids};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MODEL: &str = "data/anatomy-moe";
const PROMPT: &str = "Hello";
const NEW_TOKENS: usize = 8;

/// A running server; dropping it kills the process.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Server {
        Server::start_model(MODEL, extra)
    }

    fn start_model(model: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_anatomy"))
            .args(["serve", model, "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start anatomy serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let mut server = Server { child, port: 0 };
        server.port = line
            .trim()
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        server
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    }

    /// One request on its own connection; returns (status, body with chunking undone).
    fn request(&self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        let mut s = self.connect();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        // The server may answer (413) before it has read a large body: write from another
        // thread and read the answer here, so an early close cannot lose the answer.
        let mut writer = s.try_clone().unwrap();
        let body = body.to_vec();
        let sender = std::thread::spawn(move || {
            let _ = writer.write_all(&body);
        });
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        sender.join().unwrap();
        parse_response(&raw)
    }

    fn post(&self, path: &str, body: &Value) -> (u16, String) {
        self.request("POST", path, body.to_string().as_bytes())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Status and body of a whole HTTP/1.1 response (chunked or not).
fn parse_response(raw: &[u8]) -> (u16, String) {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let mut body = &raw[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return (status, String::from_utf8(body.to_vec()).unwrap());
    }
    let mut out = Vec::new();
    loop {
        let eol = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size");
        let size_text = std::str::from_utf8(&body[..eol]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&body[eol + 2..eol + 2 + size]);
        body = &body[eol + 2 + size + 2..];
    }
    (status, String::from_utf8(out).unwrap())
}

fn chat_body(extra: Value) -> Value {
    let mut body = json!({
        "model": "anatomy-moe",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": NEW_TOKENS,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// `anatomy generate --chat` on the same prompt: (ids, text).
fn generated() -> (Vec<u32>, String) {
    generate(true)
}

/// `anatomy generate` on [`PROMPT`], in the chat template or as is: (ids, text).
fn generate(chat: bool) -> (Vec<u32>, String) {
    let n = NEW_TOKENS.to_string();
    let mut args = vec![
        "generate",
        MODEL,
        "--prompt",
        PROMPT,
        "--max-new-tokens",
        &n,
        "--json",
    ];
    if chat {
        args.push("--chat");
    }
    let out = anatomy(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (ids(&v["ids"]), v["text"].as_str().unwrap().to_string())
}

fn json_ok(status: u16, body: &str) -> Value {
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(body).unwrap()
}

/// The `data:` payloads of a server-sent event stream.
fn events(body: &str) -> Vec<&str> {
    body.split("\n\n")
        .filter_map(|e| e.trim().strip_prefix("data: "))
        .collect()
}

/// A streamed chat answer's text (reasoning and content concatenated) and its chunks.
fn streamed_text(body: &str) -> (String, Vec<Value>) {
    let data = events(body);
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let mut text = String::new();
    for c in &chunks {
        for key in ["reasoning_content", "content"] {
            text.push_str(c["choices"][0]["delta"][key].as_str().unwrap_or(""));
        }
    }
    (text, chunks)
}

fn whole_text(v: &Value) -> String {
    let m = &v["choices"][0]["message"];
    format!(
        "{}{}",
        m["reasoning_content"].as_str().unwrap_or(""),
        m["content"].as_str().unwrap()
    )
}

#[test]
fn models_lists_the_served_model() {
    let server = Server::start();
    let (status, body) = server.request("GET", "/v1/models", b"");
    let v = json_ok(status, &body);
    assert_eq!(v["object"], "list");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["id"], "anatomy-moe");
    assert_eq!(data[0]["object"], "model");
}

#[test]
fn greedy_chat_equals_generate_token_for_token() {
    let (want_ids, want_text) = generated();
    let server = Server::start();
    let (status, body) = server.post("/v1/chat/completions", &chat_body(json!({"anatomy": true})));
    let v = json_ok(status, &body);
    let got_ids: Vec<u32> = v["anatomy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(got_ids, want_ids);
    assert_eq!(whole_text(&v), want_text);
    assert_eq!(v["usage"]["completion_tokens"], want_ids.len());
}

#[test]
fn stream_gives_the_same_text_and_ends_in_done() {
    let server = Server::start();
    let (status, body) = server.post("/v1/chat/completions", &chat_body(json!({})));
    let whole = whole_text(&json_ok(status, &body));
    let (status, body) = server.post("/v1/chat/completions", &chat_body(json!({"stream": true})));
    assert_eq!(status, 200, "{body}");
    let (text, chunks) = streamed_text(&body);
    assert_eq!(text, whole);
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
}

/// Each anatomy frame carries, for every layer, the router's experts with weights that
/// sum to one and an attention share on the first token, and a top-5 in falling order.
#[test]
fn anatomy_frames_carry_per_layer_data() {
    let server = Server::start();
    let (status, body) = server.request("GET", "/v1/models", b"");
    let model = json_ok(status, &body);
    let layers = model["data"][0]["layers"].as_u64().unwrap() as usize;
    let experts = model["data"][0]["experts"].as_u64().unwrap();
    let request = chat_body(json!({"stream": true, "anatomy": true}));
    let (status, body) = server.post("/v1/chat/completions", &request);
    assert_eq!(status, 200, "{body}");
    let (_, chunks) = streamed_text(&body);
    let frames: Vec<&Value> = chunks.iter().filter_map(|c| c.get("anatomy")).collect();
    assert_eq!(frames.len(), NEW_TOKENS);
    for f in frames {
        let per_layer = f["layers"].as_array().unwrap();
        assert_eq!(per_layer.len(), layers);
        for l in per_layer {
            let chosen = l["experts"].as_array().unwrap();
            assert!(!chosen.is_empty());
            assert!(chosen.iter().all(|e| e.as_u64().unwrap() < experts));
            let weights: Vec<f64> = l["weights"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_f64().unwrap())
                .collect();
            assert_eq!(weights.len(), chosen.len());
            assert!(
                (weights.iter().sum::<f64>() - 1.0).abs() < 1e-5,
                "{weights:?}"
            );
            let sink = l["sink"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&sink), "{sink}");
        }
        let top: Vec<f64> = f["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["p"].as_f64().unwrap())
            .collect();
        assert_eq!(top.len(), 5);
        assert!(top.windows(2).all(|w| w[0] >= w[1]), "{top:?}");
        assert_eq!(
            f["top"][0]["id"], f["id"],
            "greedy takes the most likely token"
        );
    }
}

fn assert_error(server: &Server, body: &[u8], want: u16) {
    let (status, text) = server.request("POST", "/v1/chat/completions", body);
    assert_eq!(status, want, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let e = &v["error"];
    assert!(!e["message"].as_str().unwrap().is_empty(), "{text}");
    assert!(e["type"].is_string(), "{text}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{text}"
    );
}

#[test]
fn bad_requests_get_openai_shaped_errors() {
    let server = Server::start();
    assert_error(&server, b"{\"model\": ", 400);
    let huge = vec![b' '; 2 << 20];
    assert_error(&server, &huge, 413);
    let too_many = chat_body(json!({"max_tokens": 1_000_000_000_000u64}));
    assert_error(&server, too_many.to_string().as_bytes(), 400);
    let unknown = chat_body(json!({"model": "no-such-model"}));
    assert_error(&server, unknown.to_string().as_bytes(), 404);
    let (status, text) = server.request("GET", "/v1/chat/completions", b"");
    assert_eq!(status, 405, "{text}");
    assert!(serde_json::from_str::<Value>(&text).unwrap()["error"]["message"].is_string());
    let (status, text) = server.request("GET", "/v1/no-such-endpoint", b"");
    assert_eq!(status, 404, "{text}");
    assert!(serde_json::from_str::<Value>(&text).unwrap()["error"]["message"].is_string());
    // The server still answers after all of them.
    let (status, body) = server.post("/v1/chat/completions", &chat_body(json!({})));
    json_ok(status, &body);
}

/// Tokens of the long request a client drops: the most the bundled model's context allows
/// after the prompt.
const LONG: usize = 500;

/// A client that leaves mid-stream frees the worker at once: the next request finishes
/// in far less time than the dropped one would have taken to run to its end.
#[test]
fn a_dropped_stream_frees_the_worker_for_the_next_request() {
    let (_, want_text) = generated();
    let server = Server::start();
    let long = chat_body(json!({"max_tokens": LONG}));
    let started = Instant::now();
    let (status, body) = server.post("/v1/chat/completions", &long);
    let full = started.elapsed();
    assert_eq!(json_ok(status, &body)["usage"]["completion_tokens"], LONG);

    let s = open_stream(&server, 2);
    drop(s);
    let left = Instant::now();
    let (status, body) = server.post("/v1/chat/completions", &chat_body(json!({})));
    let next = left.elapsed();
    assert_eq!(whole_text(&json_ok(status, &body)), want_text);
    assert!(
        next < full / 2,
        "the next request took {next:?}; {LONG} tokens take {full:?}"
    );
}

#[test]
fn eight_concurrent_clients_get_the_same_greedy_answer() {
    let (_, want_text) = generated();
    let server = Server::start();
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let server = &server;
                scope.spawn(move || {
                    let stream = i % 2 == 1;
                    let (status, body) = server.post(
                        "/v1/chat/completions",
                        &chat_body(json!({"stream": stream})),
                    );
                    assert_eq!(status, 200, "{body}");
                    let text = match stream {
                        true => streamed_text(&body).0,
                        false => whole_text(&json_ok(status, &body)),
                    };
                    (status, text)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (_, text) in answers {
        assert_eq!(text, want_text);
    }
}

#[test]
fn greedy_completion_equals_plain_generate() {
    let (want_ids, want_text) = generate(false);
    let server = Server::start();
    let body = json!({"model": "anatomy-moe", "prompt": PROMPT, "max_tokens": NEW_TOKENS,
                      "anatomy": true});
    let (status, text) = server.post("/v1/completions", &body);
    let v = json_ok(status, &text);
    assert_eq!(v["object"], "text_completion");
    let got_ids: Vec<u32> = v["anatomy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(got_ids, want_ids);
    assert_eq!(v["choices"][0]["text"], want_text);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = server.post("/v1/completions", &streamed);
    assert_eq!(status, 200, "{text}");
    let data = events(&text);
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    let joined: String = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap()["choices"][0]["text"].clone())
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert_eq!(joined, want_text);
}

/// Starts a long streamed chat request and reads until `chunks` `"content"` keys have
/// arrived (the role chunk carries the first); returns the open connection.
fn open_stream(server: &Server, chunks: usize) -> TcpStream {
    let mut s = server.connect();
    let body = chat_body(json!({"stream": true, "max_tokens": LONG})).to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while seen.windows(9).filter(|w| w == b"\"content\"").count() < chunks {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended early");
        seen.extend_from_slice(&buf[..n]);
    }
    s
}

/// With room for one waiting request, a third while one runs and one waits gets 503 in
/// OpenAI's shape; once both clients leave, the server soon answers again.
#[test]
fn a_full_queue_is_a_503() {
    let server = Server::start_with(&["--queue", "1"]);
    let running = open_stream(&server, 2);
    // A streamed answer's role chunk is sent as soon as the job is queued.
    let waiting = open_stream(&server, 1);
    assert_error(&server, chat_body(json!({})).to_string().as_bytes(), 503);
    drop(running);
    drop(waiting);
    // The worker notices the leavers within a token or two: the queue frees well within
    // the time the long request would have run.
    let deadline = Instant::now() + Duration::from_secs(2);
    let (status, body) = loop {
        let (status, body) = server.post("/v1/chat/completions", &chat_body(json!({})));
        if status != 503 || Instant::now() > deadline {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    json_ok(status, &body);
}

/// `logprobs` with `top_logprobs`: the greedy token is the first of its top list, the list
/// falls, its probabilities sum to at most one and match the anatomy frame's top-5.
#[test]
fn logprobs_agree_with_the_anatomy_top() {
    let server = Server::start();
    let request = chat_body(json!({"logprobs": true, "top_logprobs": 3, "anatomy": true}));
    let (status, body) = server.post("/v1/chat/completions", &request);
    let v = json_ok(status, &body);
    let entries = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    let frames = v["anatomy"].as_array().unwrap();
    assert_eq!(entries.len(), NEW_TOKENS);
    assert_eq!(frames.len(), NEW_TOKENS);
    let text: String = entries
        .iter()
        .map(|e| e["token"].as_str().unwrap())
        .collect();
    assert_eq!(text, whole_text(&v));
    for (e, f) in entries.iter().zip(frames) {
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!(top[0]["logprob"], e["logprob"]);
        let lps: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]), "{lps:?}");
        assert!(lps.iter().map(|l| l.exp()).sum::<f64>() <= 1.0 + 1e-6);
        for (t, p) in top.iter().zip(f["top"].as_array().unwrap()) {
            let (lp, p) = (t["logprob"].as_f64().unwrap(), p["p"].as_f64().unwrap());
            assert!((lp.exp() - p).abs() < 1e-6 * p.max(1e-3), "{lp} vs p {p}");
        }
    }
}

/// The ids of a whole answer's anatomy frames.
fn frame_ids(v: &Value) -> Vec<u32> {
    v["anatomy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_u64().unwrap() as u32)
        .collect()
}

/// `anatomy generate` with `args` after the model: (ids, text).
fn generate_json(model: &str, args: &[&str]) -> (Vec<u32>, String) {
    let mut all = vec!["generate", model];
    all.extend_from_slice(args);
    all.push("--json");
    let out = anatomy(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (ids(&v["ids"]), v["text"].as_str().unwrap_or("").to_string())
}

/// A real model under target/real-models, or `None` with one line saying why it is skipped.
fn real_model(file: &str, test: &str) -> Option<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/real-models")
        .join(file);
    if path.is_file() {
        return Some(path.to_string_lossy().into_owned());
    }
    eprintln!(
        "skipped {test}: {} is absent (fetch it with `bash scripts/get-real-models.sh`)",
        path.display()
    );
    None
}

/// A GGUF file is served with its own tokenizer and chat template: SmolLM2's greedy chat
/// answer equals `anatomy generate FILE.gguf --chat` token for token, streamed or whole.
#[test]
fn gguf_chat_uses_the_files_own_template() {
    let file = "smollm2-135m-instruct-q4_1.gguf";
    let Some(model) = real_model(file, "gguf_chat_uses_the_files_own_template") else {
        return;
    };
    let question = "What is the capital of France?";
    let (want_ids, want_text) = generate_json(
        &model,
        &["--chat", "--prompt", question, "--max-new-tokens", "12"],
    );
    let server = Server::start_model(&model, &[]);
    let body = json!({"model": file, "messages": [{"role": "user", "content": question}],
                      "max_tokens": 12, "anatomy": true});
    let (status, text) = server.post("/v1/chat/completions", &body);
    let v = json_ok(status, &text);
    assert_eq!(frame_ids(&v), want_ids);
    let want_text = as_the_message_holds_it(&model, &v, &want_ids, want_text);
    assert_eq!(whole_text(&v), want_text);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = server.post("/v1/chat/completions", &streamed);
    assert_eq!(status, 200, "{text}");
    assert_eq!(streamed_text(&text).0, want_text);
}

/// `generate`'s text of `ids` as the API's message holds it: an answer that stopped ends
/// with its end-of-turn token, which `generate` prints and the message leaves out.
fn as_the_message_holds_it(model: &str, v: &Value, ids: &[u32], text: String) -> String {
    let Some((_, kept)) = ids.split_last() else {
        return text;
    };
    if v["choices"][0]["finish_reason"] != "stop" {
        return text;
    }
    if kept.is_empty() {
        return String::new();
    }
    let list = crate::common::join(kept);
    let out = anatomy(&["detokenize", &list, "--vocab", model, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    d["text"].as_str().unwrap().to_string()
}

/// A base model without a chat template (Gemma 3 270M) serves completions equal to plain
/// `anatomy generate` (BOS first, as llama.cpp tokenizes) and refuses chat with a 400 that
/// says what is missing.
#[test]
fn a_base_gguf_serves_completions_and_refuses_chat() {
    let file = "gemma3-270m-q4_k_m.gguf";
    let Some(model) = real_model(file, "a_base_gguf_serves_completions_and_refuses_chat") else {
        return;
    };
    let prompt = "The capital of France is";
    let (want_ids, want_text) =
        generate_json(&model, &["--prompt", prompt, "--max-new-tokens", "8"]);
    let server = Server::start_model(&model, &[]);
    let body = json!({"model": file, "prompt": prompt, "max_tokens": 8, "anatomy": true});
    let (status, text) = server.post("/v1/completions", &body);
    let v = json_ok(status, &text);
    assert_eq!(frame_ids(&v), want_ids);
    assert_eq!(v["choices"][0]["text"], want_text);
    let chat = json!({"model": file, "messages": [{"role": "user", "content": "Hi"}]});
    let (status, text) = server.post("/v1/chat/completions", &chat);
    assert_eq!(status, 400, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["code"], "no_chat_template");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/completions")
    );
}

/// Chapter 8's budget over HTTP on the bundled MoE: a reply continued from an opening
/// `<think>` (`continue_final_message`) gets the model's own first N tokens, then the
/// early-stop text that ends with the vocabulary's own `</think>` id, marked `budget_cut` in
/// the anatomy frames, with the reasoning split from the answer at that id — the ids
/// `anatomy generate --thinking-budget N` gives for the same prompt ids.
#[test]
fn thinking_budget_over_http_cuts_with_the_models_own_think_end() {
    use llm_anatomy::chat::thinking::ThinkingBudget;
    let budget = 3;
    let tok = llm_anatomy::tokenizer::Tokenizer::qwen().unwrap();
    let early = ThinkingBudget::for_tokenizer(budget, &tok).unwrap();
    let server = Server::start();
    let body = chat_body(json!({
        "messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": "<think>\n"}],
        "continue_final_message": true, "thinking_budget": budget, "max_tokens": 40,
        "anatomy": true,
    }));
    let (status, text) = server.post("/v1/chat/completions", &body);
    let v = json_ok(status, &text);
    assert_eq!(v["budget_cut"], true);
    let got = frame_ids(&v);
    let frames = v["anatomy"].as_array().unwrap();
    let cut: Vec<bool> = frames.iter().map(|f| f["budget_cut"] == true).collect();
    let span = budget..budget + early.early_stop_ids.len();
    assert_eq!(&got[span.clone()], &early.early_stop_ids[..]);
    assert!(cut.iter().enumerate().all(|(i, &c)| c == span.contains(&i)));
    assert!(
        early.early_stop_ids.contains(&early.think_end),
        "the early-stop text closes the block with the vocabulary's </think>"
    );
    let chat = llm_anatomy::chat::render(
        &[llm_anatomy::chat::Message::new("user", PROMPT)],
        &[],
        &llm_anatomy::chat::ChatOptions {
            add_generation_prompt: true,
            enable_thinking: None,
        },
    )
    .unwrap();
    let prompt_ids = tok.encode(&(chat + "<think>\n")).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], prompt_ids.len());
    let list: Vec<String> = prompt_ids.iter().map(u32::to_string).collect();
    let (want, _) = generate_json(
        MODEL,
        &[
            "--ids",
            &list.join(","),
            "--thinking-budget",
            "3",
            "--max-new-tokens",
            "40",
        ],
    );
    assert_eq!(got, want);
    let message = &v["choices"][0]["message"];
    let before_cut = tok.decode(&got[..budget]).unwrap();
    let reasoning = message["reasoning_content"].as_str().unwrap();
    assert!(
        reasoning.trim_start().starts_with(before_cut.trim_start()),
        "{reasoning:?}"
    );
    assert!(
        reasoning.contains("Considering the limited time"),
        "{reasoning:?}"
    );
    let answer = tok.decode(&got[span.end..]).unwrap();
    assert_eq!(message["content"].as_str().unwrap(), answer.trim_start());
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = server.post("/v1/chat/completions", &streamed);
    assert_eq!(status, 200, "{text}");
    assert_eq!(streamed_text(&text).0, whole_text(&v));
}
