//! The Qwen3 chat template, rendered natively. Each branch below mirrors a block of the
//! Jinja template Qwen published in Qwen3's `tokenizer_config.json` (the copy the tests use
//! is `tests/fixtures/chat/qwen3_chat_template.jinja`, provenance in that folder's README),
//! and the result is compared character for character with jinja2 under transformers'
//! settings (`trim_blocks`, `lstrip_blocks`, its `tojson`).
//!
//! Where the template would raise (a user message without string content, an empty
//! conversation), [`render`] returns an error that names the message and field.

use crate::error::{Error, Result};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// A JSON value that keeps object keys in document order (Python's `json.loads` does, and
/// `tojson` writes them back in that order).
#[derive(Clone, Debug, PartialEq)]
pub enum JsonValue {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    /// An integer outside 64 bits, as its digits: Python's `json.loads` keeps any integer
    /// exact (serde_json would round it to a float).
    BigInt(String),
    Float(f64),
    Str(String),
    Array(Vec<JsonValue>),
    Object(Vec<(String, JsonValue)>),
}

/// A message's `content` as the template sees it: absent, `null`, or a string.
#[derive(Clone, Debug, PartialEq)]
pub enum Content {
    Missing,
    Null,
    Text(String),
}

/// One tool call of an assistant message (`{"type": "function", "function": {...}}` or the
/// flat `{"name", "arguments"}` form).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: JsonValue,
}

/// One chat message.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub role: String,
    pub content: Content,
    /// The assistant's reasoning, when passed separately from `content`.
    pub reasoning_content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
}

/// The template's switches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChatOptions {
    /// End with the header of a new assistant turn, for the model to continue.
    pub add_generation_prompt: bool,
    /// `None` = not passed (the template's "not defined"); `Some(false)` pre-fills an empty
    /// think block so the model answers without reasoning.
    pub enable_thinking: Option<bool>,
}

/// A conversation file: the messages and, optionally, the tool schemas.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conversation {
    pub messages: Vec<Message>,
    pub tools: Vec<JsonValue>,
}

impl Message {
    /// A message with string content and nothing else.
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: Content::Text(content.into()),
            reasoning_content: None,
            tool_calls: Vec::new(),
        }
    }

    /// An assistant message with separate reasoning.
    pub fn assistant_with_reasoning(content: &str, reasoning: &str) -> Message {
        Message {
            reasoning_content: Some(reasoning.into()),
            ..Message::new("assistant", content)
        }
    }

    fn text(&self, index: usize) -> Result<&str> {
        match &self.content {
            Content::Text(t) => Ok(t),
            Content::Missing | Content::Null => Err(Error::field(
                format!("messages[{index}] (role {:?})", self.role),
                "content",
                "must be a string for this role (the Qwen3 template concatenates it)",
            )),
        }
    }
}

/// Renders `messages` exactly as Qwen3's chat template does.
pub fn render(messages: &[Message], tools: &[JsonValue], opts: &ChatOptions) -> Result<String> {
    let first = messages.first().ok_or_else(|| {
        Error::Invalid("the conversation is empty (the Qwen3 template reads messages[0])".into())
    })?;
    let mut out = String::new();
    // 1. System block: the first message if it is a system message, plus the tool schemas.
    if !tools.is_empty() {
        out.push_str("<|im_start|>system\n");
        if first.role == "system" {
            out.push_str(first.text(0)?);
            out.push_str("\n\n");
        }
        out.push_str(TOOLS_HEADER);
        for tool in tools {
            out.push('\n');
            out.push_str(&to_json(tool));
        }
        out.push_str(TOOLS_FOOTER);
    } else if first.role == "system" {
        out.push_str("<|im_start|>system\n");
        out.push_str(first.text(0)?);
        out.push_str("<|im_end|>\n");
    }
    // ANCHOR: last_query
    // 2. The last "real" user query: walking back, the first user message that is not a
    //    wrapped tool response. Reasoning is kept only for assistant turns after it.
    let mut last_query_index = messages.len() - 1;
    for (index, m) in messages.iter().enumerate().rev() {
        if m.role == "user" {
            let c = m.text(index)?;
            if !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>")) {
                last_query_index = index;
                break;
            }
        }
    }
    // ANCHOR_END: last_query
    // ANCHOR: render_turns
    // 3. The turns.
    let last = messages.len() - 1;
    for (index, m) in messages.iter().enumerate() {
        match m.role.as_str() {
            "user" => push_turn(&mut out, "user", m.text(index)?),
            "system" if index > 0 => push_turn(&mut out, "system", m.text(index)?),
            "assistant" => render_assistant(&mut out, m, index, index == last, last_query_index)?,
            "tool" => {
                if index == 0 || messages[index - 1].role != "tool" {
                    out.push_str("<|im_start|>user");
                }
                out.push_str("\n<tool_response>\n");
                out.push_str(match &m.content {
                    Content::Text(t) => t,
                    Content::Null => "None", // Jinja prints Python's None
                    Content::Missing => "",
                });
                out.push_str("\n</tool_response>");
                if index == last || messages[index + 1].role != "tool" {
                    out.push_str("<|im_end|>\n");
                }
            }
            _ => {} // other roles (and the first system message) render nothing here
        }
    }
    // 4. The generation prompt; enable_thinking = false pre-fills an empty think block.
    if opts.add_generation_prompt {
        out.push_str("<|im_start|>assistant\n");
        if opts.enable_thinking == Some(false) {
            out.push_str(EMPTY_THINK);
        }
    }
    Ok(out)
    // ANCHOR_END: render_turns
}

/// An assistant turn: split `<think>…</think>` off the content (unless the reasoning came
/// separately), keep it only after the last user query and only on the last turn or
/// when it is non-empty; then the tool calls.
fn render_assistant(
    out: &mut String,
    m: &Message,
    index: usize,
    is_last: bool,
    last_query_index: usize,
) -> Result<()> {
    let raw = m.text(index)?;
    let (mut content, mut reasoning) = (raw, "");
    if let Some(r) = &m.reasoning_content {
        reasoning = r;
    } else if raw.contains("</think>") {
        content = raw
            .rsplit("</think>")
            .next()
            .unwrap_or("")
            .trim_start_matches('\n');
        let before = raw
            .split("</think>")
            .next()
            .unwrap_or("")
            .trim_end_matches('\n');
        reasoning = before
            .rsplit("<think>")
            .next()
            .unwrap_or("")
            .trim_start_matches('\n');
    }
    // ANCHOR: keep_reasoning
    out.push_str("<|im_start|>assistant\n");
    if index > last_query_index && (is_last || !reasoning.is_empty()) {
        out.push_str("<think>\n");
        out.push_str(reasoning.trim_matches('\n'));
        out.push_str("\n</think>\n\n");
        out.push_str(content.trim_start_matches('\n'));
    } else {
        out.push_str(content);
    }
    // ANCHOR_END: keep_reasoning
    for (k, call) in m.tool_calls.iter().enumerate() {
        if k > 0 || !content.is_empty() {
            out.push('\n');
        }
        out.push_str("<tool_call>\n{\"name\": \"");
        out.push_str(&call.name);
        out.push_str("\", \"arguments\": ");
        match &call.arguments {
            JsonValue::Str(s) => out.push_str(s),
            other => out.push_str(&to_json(other)),
        }
        out.push_str("}\n</tool_call>");
    }
    out.push_str("<|im_end|>\n");
    Ok(())
}

/// The block `enable_thinking = false` appends after the generation prompt.
pub const EMPTY_THINK: &str = "<think>\n\n</think>\n\n";

const TOOLS_HEADER: &str = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const TOOLS_FOOTER: &str = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

fn push_turn(out: &mut String, role: &str, content: &str) {
    out.push_str("<|im_start|>");
    out.push_str(role);
    out.push('\n');
    out.push_str(content);
    out.push_str("<|im_end|>\n");
}

// ------------------------------------------------------------------ conversation files

/// Parses a conversation: either a JSON array of messages or an object
/// `{"messages": [...], "tools": [...]}`. `what` names the source in errors.
pub fn parse_conversation(text: &str, what: &str) -> Result<Conversation> {
    let mut doc: JsonValue = serde_json::from_str(text).map_err(|source| Error::Json {
        what: what.into(),
        source,
    })?;
    let mut literals = float_literals(text).into_iter();
    restore_big_ints(&mut doc, &mut literals);
    Conversation::from_json(&doc, what)
}

/// The number literals of a JSON text that serde_json reads as floats (fractions,
/// exponents, and integers outside 64 bits), in document order.
fn float_literals(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut in_string) = (0, false);
    while i < b.len() {
        let c = b[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_string = true;
        } else if c == b'-' || c.is_ascii_digit() {
            let start = i;
            while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                i += 1;
            }
            let literal = &text[start..i];
            if serde_json::from_str::<serde_json::Number>(literal).is_ok_and(|n| n.is_f64()) {
                out.push(literal);
            }
            continue;
        }
        i += 1;
    }
    out
}

/// Walks `doc` in document order, pairing each float with its literal: one that is an
/// integer becomes [`JsonValue::BigInt`] (`-0` is Python's `0`).
fn restore_big_ints<'a>(doc: &mut JsonValue, literals: &mut impl Iterator<Item = &'a str>) {
    match doc {
        JsonValue::Float(_) => {
            if let Some(lit) = literals.next()
                && !lit.contains(['.', 'e', 'E'])
            {
                let digits = lit.trim_start_matches('-');
                let zero = digits.bytes().all(|d| d == b'0');
                *doc = JsonValue::BigInt(if zero { "0".into() } else { lit.into() });
            }
        }
        JsonValue::Array(items) => {
            for item in items {
                restore_big_ints(item, literals);
            }
        }
        JsonValue::Object(entries) => {
            for (_, value) in entries {
                restore_big_ints(value, literals);
            }
        }
        _ => {}
    }
}

impl Conversation {
    /// A conversation from a parsed JSON document (array of messages, or an object with
    /// "messages" and optional "tools").
    pub fn from_json(doc: &JsonValue, what: &str) -> Result<Conversation> {
        let (messages, tools) = match doc {
            JsonValue::Array(items) => (items.as_slice(), &[][..]),
            JsonValue::Object(_) => {
                let messages = match doc.get("messages") {
                    Some(JsonValue::Array(items)) => items.as_slice(),
                    _ => {
                        return Err(Error::field(
                            what,
                            "messages",
                            "must be an array of messages",
                        ));
                    }
                };
                let tools = match doc.get("tools") {
                    None | Some(JsonValue::Null) => &[][..],
                    Some(JsonValue::Array(items)) => items.as_slice(),
                    Some(_) => return Err(Error::field(what, "tools", "must be an array")),
                };
                (messages, tools)
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "{what}: expected an array of messages or an object with \"messages\""
                )));
            }
        };
        let messages = messages
            .iter()
            .enumerate()
            .map(|(i, m)| parse_message(m, &format!("{what}: messages[{i}]")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Conversation {
            messages,
            tools: tools.to_vec(),
        })
    }

    /// Renders the conversation with Qwen3's template.
    pub fn render(&self, opts: &ChatOptions) -> Result<String> {
        render(&self.messages, &self.tools, opts)
    }
}

/// Reads and parses a conversation file.
pub fn load_conversation(path: &std::path::Path) -> Result<Conversation> {
    let bytes = crate::error::read_file(path)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::Invalid(format!("{}: not UTF-8", path.display())))?;
    parse_conversation(&text, &path.display().to_string())
}

fn parse_message(v: &JsonValue, what: &str) -> Result<Message> {
    if !matches!(v, JsonValue::Object(_)) {
        return Err(Error::Invalid(format!(
            "{what}: a message must be an object"
        )));
    }
    let role = match v.get("role") {
        Some(JsonValue::Str(s)) => s.clone(),
        _ => return Err(Error::field(what, "role", "must be a string")),
    };
    let content = match v.get("content") {
        None => Content::Missing,
        Some(JsonValue::Null) => Content::Null,
        Some(JsonValue::Str(s)) => Content::Text(s.clone()),
        Some(_) => {
            return Err(Error::field(
                what,
                "content",
                "must be a string (content lists are not supported)",
            ));
        }
    };
    // transformers copies `thinking` or `reasoning` into `reasoning_content` when that is
    // absent (`_alias_reasoning_fields`): the first non-null of the three wins.
    let mut reasoning_content = None;
    for key in ["reasoning_content", "thinking", "reasoning"] {
        match v.get(key) {
            None | Some(JsonValue::Null) => continue,
            Some(JsonValue::Str(s)) => {
                reasoning_content = Some(s.clone());
                break;
            }
            Some(_) => return Err(Error::field(what, key, "must be a string")),
        }
    }
    let tool_calls = match v.get("tool_calls") {
        None | Some(JsonValue::Null) => Vec::new(),
        Some(JsonValue::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(k, c)| parse_tool_call(c, &format!("{what}.tool_calls[{k}]")))
            .collect::<Result<Vec<_>>>()?,
        Some(_) => return Err(Error::field(what, "tool_calls", "must be an array")),
    };
    Ok(Message {
        role,
        content,
        reasoning_content,
        tool_calls,
    })
}

fn parse_tool_call(v: &JsonValue, what: &str) -> Result<ToolCall> {
    // `{%- if tool_call.function %}`: a non-empty function object replaces the call.
    let call = match v.get("function") {
        Some(f @ JsonValue::Object(entries)) if !entries.is_empty() => f,
        _ => v,
    };
    let name = match call.get("name") {
        Some(JsonValue::Str(s)) => s.clone(),
        _ => return Err(Error::field(what, "name", "must be a string")),
    };
    let arguments = call
        .get("arguments")
        .cloned()
        .ok_or_else(|| Error::field(what, "arguments", "is missing"))?;
    Ok(ToolCall { name, arguments })
}

// ------------------------------------------------------------------ Python-style JSON

impl JsonValue {
    /// The value of `key` in an object (the last one, as Python's dict keeps).
    pub fn get(&self, key: &str) -> Option<&JsonValue> {
        match self {
            JsonValue::Object(entries) => {
                entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
            }
            _ => None,
        }
    }
}

/// `json.dumps(value, ensure_ascii=False)` — transformers' `tojson` filter: `", "` and
/// `": "` separators, keys in order, non-ASCII kept, floats as Python's `repr`.
pub fn to_json(value: &JsonValue) -> String {
    let mut out = String::new();
    write_json(value, &mut out);
    out
}

fn write_json(value: &JsonValue, out: &mut String) {
    match value {
        JsonValue::Null => out.push_str("null"),
        JsonValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        JsonValue::Int(i) => out.push_str(&i.to_string()),
        JsonValue::UInt(u) => out.push_str(&u.to_string()),
        JsonValue::BigInt(digits) => out.push_str(digits),
        JsonValue::Float(f) => out.push_str(&py_float_repr(*f)),
        JsonValue::Str(s) => write_json_string(s, out),
        JsonValue::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_json(item, out);
            }
            out.push(']');
        }
        JsonValue::Object(entries) => {
            out.push('{');
            // Python's dict keeps the first position of a repeated key and its last value.
            let mut seen: Vec<&str> = Vec::new();
            for (k, _) in entries {
                if seen.contains(&k.as_str()) {
                    continue;
                }
                if !seen.is_empty() {
                    out.push_str(", ");
                }
                seen.push(k);
                write_json_string(k, out);
                out.push_str(": ");
                write_json(value.get(k).expect("key present"), out);
            }
            out.push('}');
        }
    }
}

fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest digits that round-trip, in fixed notation for
/// exponents −4 ≤ e < 16 (with ".0" on whole numbers), else `1.5e-05` / `1e+16`.
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sci = format!("{:e}", x.abs()); // shortest round-trip digits, e.g. "1.2345e-7"
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if !(-4..16).contains(&exp) {
        let sign_e = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{sign_e}{:02}", exp.abs());
    }
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let point = exp as usize + 1;
    if digits.len() <= point {
        format!("{sign}{digits}{}.0", "0".repeat(point - digits.len()))
    } else {
        format!("{sign}{}.{}", &digits[..point], &digits[point..])
    }
}

impl<'de> Deserialize<'de> for JsonValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = JsonValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue::Null)
    }
    fn visit_none<E: de::Error>(self) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue::UInt(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<JsonValue, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(JsonValue::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<JsonValue, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, JsonValue>()? {
            entries.push((k, v));
        }
        Ok(JsonValue::Object(entries))
    }
}
