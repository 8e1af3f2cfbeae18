//! A real GGUF's own chat template and the chat loop on it (src/chat/jinja.rs,
//! `qwen3::gguf_prompt`):
//!
//! - SmolLM2-135M-Instruct's `tokenizer.chat_template`, rendered here, equals jinja2's
//!   rendering as transformers sets it up, byte for byte, on every case of
//!   data/real/chat-smollm2.json (scripts/gen_real_chat_fixtures.py): user only, system +
//!   user, multi-turn, a closed conversation, non-ASCII, empty content, with and without the
//!   generation prompt;
//! - Gemma 3 270M (a base model) carries no template: asking for one is an error naming
//!   the key; its prompts (`generate`, `anatomy tokenize`) start with its BOS, as the
//!   file's `add_bos_token` says;
//! - `generate --chat` on SmolLM2, greedy: the prompt's ids equal llama.cpp's on the same
//!   file (stored by the generator); the answer follows llama.cpp's greedy one up to the
//!   first near tie (llama.cpp's pick within 1/127 of the logit scale of ours — its 8-bit
//!   activations), says 4 and stops at the file's end token.
//!
//! Without the model files these tests say what they skip and how to fetch them
//! (`bash scripts/get-real-models.sh`).

use crate::real_model::real_model_path;
use llm_anatomy::chat::Message;
use llm_anatomy::chat::jinja::render_gguf_chat;
use llm_anatomy::qwen3::generate::{Prompt, TextRequest, gguf_prompt};
use llm_anatomy::qwen3::{self, Model, Sampling};
use llm_anatomy::tokenizer::gguf_vocab;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

const SMOLLM2: &str = "smollm2-135m-instruct-q4_1.gguf";
const GEMMA3: &str = "gemma3-270m-q4_k_m.gguf";

#[test]
fn smollm2_template_renders_as_jinja2() {
    let Some(path) = real_model_path(SMOLLM2, "smollm2_template_renders_as_jinja2") else {
        return;
    };
    let vocab = gguf_vocab::open(&path).unwrap();
    let text = std::fs::read_to_string(root().join("data/real/chat-smollm2.json")).unwrap();
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(fixture["file"], SMOLLM2);
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 5, "{} cases", cases.len());
    for case in cases {
        let messages: Vec<Message> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let add = case["add_generation_prompt"].as_bool().unwrap();
        let ours = render_gguf_chat(&path, &vocab, &messages, add).unwrap();
        assert_eq!(
            ours,
            case["rendered"].as_str().unwrap(),
            "case {}",
            case["name"]
        );
    }
}

#[test]
fn gemma3_has_no_template_and_prompts_start_with_its_bos() {
    let test = "gemma3_has_no_template_and_prompts_start_with_its_bos";
    let Some(path) = real_model_path(GEMMA3, test) else {
        return;
    };
    let vocab = gguf_vocab::open(&path).unwrap();
    let err = render_gguf_chat(&path, &vocab, &[Message::new("user", "Hi")], true).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("tokenizer.chat_template") && text.contains("no chat template"),
        "{text}"
    );
    let chat = match gguf_prompt(&path, "Hi", true) {
        Ok(_) => panic!("--chat on a file without a template must be an error"),
        Err(e) => e.to_string(),
    };
    assert!(chat.contains("tokenizer.chat_template"), "{chat}");
    assert!(vocab.add_bos);
    let (_, ids) = gguf_prompt(&path, "The sky is", false).unwrap();
    assert_eq!(ids.first().copied(), vocab.bos);
    assert_eq!(&ids[1..], vocab.encode("The sky is", false, true).unwrap());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(["tokenize", "--json", "--vocab"])
        .arg(&path)
        .arg("The sky is")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids_of(&v["ids"]), ids, "anatomy tokenize");
}

/// The ids of a JSON array.
fn ids_of(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn smollm2_generate_chat_follows_llama_cpp_and_stops_at_its_end_token() {
    let test = "smollm2_generate_chat_follows_llama_cpp_and_stops_at_its_end_token";
    let Some(path) = real_model_path(SMOLLM2, test) else {
        return;
    };
    let text = std::fs::read_to_string(root().join("data/real/chat-smollm2.json")).unwrap();
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    let llama = &fixture["greedy_llama_cpp"];
    let question = llama["question"].as_str().unwrap();
    let expected = ids_of(&llama["continuation"]);
    let (_, prompt) = gguf_prompt(&path, question, true).unwrap();
    assert_eq!(prompt, ids_of(&llama["prompt_ids"]), "prompt ids");
    let request = TextRequest {
        prompt: Prompt::Text {
            text: question,
            chat: true,
        },
        max_new_tokens: expected.len() + 16,
        sampling: Sampling::Greedy,
        thinking_budget: None,
    };
    let prepared = request.prepare(&path).unwrap();
    let (config, file) = qwen3::open(&path).unwrap();
    let model = Model::new(config, &file).unwrap();
    let out = prepared.run(&model).unwrap();
    eprintln!("SmolLM2 --chat greedy on {question:?}: {:?}", out.text);
    // Equal ids up to the first step where llama.cpp's pick is a near tie in our logits:
    // llama.cpp rounds activations to 8 bits before its Q4_1/Q8_0 dot products (relative
    // error up to 1/127), so ties closer than that may break either way.
    let same = out
        .ids
        .iter()
        .zip(&expected)
        .take_while(|(a, b)| a == b)
        .count();
    if same < expected.len() {
        let mut context = prompt.clone();
        context.extend(&out.ids[..same]);
        let logits = model.logits(&context).unwrap();
        let vocab_size = model.config.vocab_size;
        let row = &logits.logits[(context.len() - 1) * vocab_size..context.len() * vocab_size];
        let scale = row.iter().fold(0f32, |m, x| m.max(x.abs()));
        let (ours, theirs) = (row[out.ids[same] as usize], row[expected[same] as usize]);
        eprintln!(
            "first difference at new token {same}: ours {} ({ours}), llama.cpp {} ({theirs}), scale {scale}",
            out.ids[same], expected[same]
        );
        assert!(ours - theirs <= scale / 127.0, "not a near tie");
    }
    // A sensible answer to "2 + 2": the text says 4.
    assert!(out.text.as_deref().unwrap().contains('4'), "{:?}", out.text);
    let vocab = gguf_vocab::open(&path).unwrap();
    assert_eq!(
        out.ids.last().copied(),
        vocab.eos,
        "stops at the file's eos"
    );
}

/// `anatomy lost-in-middle` on SmolLM2 wraps document and question in the file's own chat
/// template: its prompt text equals the GGUF template's rendering of the same system and
/// user turns.
#[test]
fn smollm2_lost_in_middle_prompt_is_the_files_template() {
    use llm_anatomy::long_context::lost_in_middle::{Placement, build_trial};
    use llm_anatomy::qwen3::lost_in_middle::{SYSTEM_PROMPT, prompt_text};
    let test = "smollm2_lost_in_middle_prompt_is_the_files_template";
    let Some(path) = real_model_path(SMOLLM2, test) else {
        return;
    };
    let vocab = gguf_vocab::open(&path).unwrap();
    let config = qwen3::open(&path).unwrap().0;
    for placement in Placement::ALL {
        let trial = build_trial(60, placement, 3);
        let user = format!("{}\n\n{}", trial.document, trial.question);
        let messages = [
            Message::new("system", SYSTEM_PROMPT),
            Message::new("user", &user),
        ];
        let want = render_gguf_chat(&path, &vocab, &messages, true).unwrap();
        let got = prompt_text(&trial, true, &config.model_type).unwrap();
        assert_eq!(got, want, "{placement:?}");
    }
}
