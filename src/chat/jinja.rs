//! A GGUF file's own chat template (`tokenizer.chat_template`), rendered with jinja2's
//! semantics as transformers renders it: `trim_blocks` and `lstrip_blocks` on,
//! `raise_exception(msg)` failing the render, `tojson` as Python's `json.dumps` with
//! `ensure_ascii=False`, and `messages`, `bos_token`, `eos_token`, `add_generation_prompt`
//! in the context.
//!
//! Which template is used when: Qwen files and directories go through the hand-written
//! Qwen3 template ([`super::template`], the one the chapter teaches); any other GGUF file
//! goes through the template it carries, here. A file without one is an error that says so
//! (Gemma 3 270M is a base model and has none).

use super::template::{Content, JsonValue, Message, to_json};
use crate::tokenizer::gguf_vocab::{CHAT_TEMPLATE_KEY, GgufVocab};
use crate::{Error, Result};
use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, ErrorKind};

/// What the template is rendered with besides the messages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateContext {
    pub bos_token: String,
    pub eos_token: String,
    /// End with the header of a new assistant turn, for the model to continue.
    pub add_generation_prompt: bool,
}

/// Renders `template` (from `what`, named in errors) on `messages`.
pub fn render_template(
    what: &str,
    template: &str,
    messages: &[Message],
    ctx: &TemplateContext,
) -> Result<String> {
    let env = environment();
    let messages: Vec<Value> = messages.iter().map(message_value).collect();
    let context = minijinja::context! {
        messages => messages,
        bos_token => ctx.bos_token,
        eos_token => ctx.eos_token,
        add_generation_prompt => ctx.add_generation_prompt,
    };
    env.render_str(template, context).map_err(|e| {
        let mut detail = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            detail.push_str(&format!(": {s}"));
            source = s.source();
        }
        Error::field(what, "tokenizer.chat_template", detail)
    })
}

/// The text of `messages` in the chat template of the GGUF `file` whose tokenizer is
/// `vocab`, with its BOS and EOS tokens' text in the context. A file without a template is
/// an error naming the key.
pub fn render_gguf_chat(
    file: &std::path::Path,
    vocab: &GgufVocab,
    messages: &[Message],
    add_generation_prompt: bool,
) -> Result<String> {
    let what = file.display().to_string();
    let Some(template) = vocab.chat_template.as_deref() else {
        return Err(Error::field(
            what,
            CHAT_TEMPLATE_KEY,
            "absent: this file carries no chat template (a base model); prompt it without --chat",
        ));
    };
    let token_text = |id: Option<u32>| -> Result<String> {
        match id {
            Some(id) => Ok(String::from_utf8_lossy(vocab.tokenizer.token_bytes(id)?).into_owned()),
            None => Ok(String::new()),
        }
    };
    let ctx = TemplateContext {
        bos_token: token_text(vocab.bos)?,
        eos_token: token_text(vocab.eos)?,
        add_generation_prompt,
    };
    render_template(&what, template, messages, &ctx)
}

/// The environment transformers' `_compile_jinja_template` sets up.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    env.add_filter(
        "tojson",
        |v: Value| -> std::result::Result<Value, minijinja::Error> {
            Ok(Value::from_safe_string(to_json(&json_of(&v)?)))
        },
    );
    env
}

/// A message as the template sees it: `role`, and `content` unless it is missing.
fn message_value(m: &Message) -> Value {
    let mut pairs: Vec<(&str, Value)> = vec![("role", Value::from(m.role.as_str()))];
    match &m.content {
        Content::Missing => {}
        Content::Null => pairs.push(("content", Value::from(()))),
        Content::Text(t) => pairs.push(("content", Value::from(t.as_str()))),
    }
    if let Some(r) = &m.reasoning_content {
        pairs.push(("reasoning_content", Value::from(r.as_str())));
    }
    Value::from_iter(pairs)
}

/// A template value as JSON, for `tojson`.
fn json_of(v: &Value) -> std::result::Result<JsonValue, minijinja::Error> {
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => JsonValue::Null,
        ValueKind::Bool => JsonValue::Bool(v.is_true()),
        ValueKind::Number => match v.as_i64() {
            Some(i) if !v.to_string().contains(['.', 'e', 'E']) => JsonValue::Int(i),
            _ => JsonValue::Float(f64::try_from(v.clone()).unwrap_or(f64::NAN)),
        },
        ValueKind::String => JsonValue::Str(v.as_str().unwrap_or_default().to_string()),
        ValueKind::Seq | ValueKind::Iterable => JsonValue::Array(
            v.try_iter()?
                .map(|x| json_of(&x))
                .collect::<std::result::Result<_, _>>()?,
        ),
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in v.try_iter()? {
                let value = v.get_item(&key)?;
                entries.push((key.to_string(), json_of(&value)?));
            }
            JsonValue::Object(entries)
        }
        _ => {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a {} value", v.kind()),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_exception_is_an_error_naming_the_key() {
        let e = render_template(
            "t.gguf",
            "{{ raise_exception('no system role') }}",
            &[],
            &TemplateContext::default(),
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("tokenizer.chat_template") && text.contains("no system role"),
            "{text}"
        );
    }

    #[test]
    fn trims_blocks_and_writes_json_as_python_does() {
        let t = "{% for m in messages %}\n  {{ m | tojson }}\n{% endfor %}";
        let out = render_template(
            "t",
            t,
            &[Message::new("user", "é\"")],
            &TemplateContext::default(),
        )
        .unwrap();
        assert_eq!(out, "  {\"role\": \"user\", \"content\": \"é\\\"\"}\n");
    }
}
