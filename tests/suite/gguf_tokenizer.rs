//! Chapter 11 oracle: the tokenizer read from a GGUF file against llama.cpp. The fixture
//! (scripts/gen_gguf_tokenizer_fixture.py) is Qwen3's vocabulary in the layout llama.cpp's
//! converter writes, with llama.cpp's ids (llama-cpp-python 0.3.36, vocab_only) for the
//! chapter's strings. Also: it equals the crate's Qwen tokenizer, it survives our own
//! writer, and malformed tokenizer metadata is an error naming the key, never a panic.

use llm_anatomy::gguf::{Gguf, GgufWriter, MetaValue, parse};
use llm_anatomy::tokenizer::Tokenizer;
use llm_anatomy::tokenizer::gguf_vocab::{
    self, BOS_KEY, EOS_KEY, MERGES_KEY, MODEL_KEY, PAD_KEY, PRE_KEY, TOKENS_KEY, TYPES_KEY,
    tokenizer_from_gguf, tokenizer_from_metadata,
};
use llm_anatomy::tokenizer::tokenizer_json::bytes_to_unicode;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_tokenizer")
}

fn expected() -> &'static Value {
    static V: OnceLock<Value> = OnceLock::new();
    V.get_or_init(|| {
        serde_json::from_slice(&std::fs::read(dir().join("expected.json")).unwrap()).unwrap()
    })
}

fn file() -> &'static Gguf {
    static G: OnceLock<Gguf> = OnceLock::new();
    G.get_or_init(|| Gguf::open(&dir().join("qwen3_vocab.gguf")).unwrap())
}

fn from_file() -> &'static gguf_vocab::GgufVocab {
    static T: OnceLock<gguf_vocab::GgufVocab> = OnceLock::new();
    T.get_or_init(|| tokenizer_from_gguf(file()).unwrap())
}

#[test]
fn open_reads_the_file_and_names_a_bad_one() {
    let v = gguf_vocab::open(&dir().join("qwen3_vocab.gguf")).unwrap();
    assert_eq!(
        v.tokenizer.encode("<|im_start|>user").unwrap(),
        [151644, 872]
    );
    let e = gguf_vocab::open(&dir().join("expected.json"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("expected.json"), "{e}");
    // A model file without a vocabulary (the model fixtures: tokenizer.ggml.model "none").
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_models");
    let e = gguf_vocab::open(&models.join("qwen2/q8_0.gguf"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("q8_0.gguf") && e.contains("no vocabulary"),
        "{e}"
    );
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn special_ids_and_template_are_llama_cpps() {
    let v = from_file();
    let l = &expected()["llama_cpp"];
    assert_eq!(v.n_tokens as u64, l["n_tokens"].as_u64().unwrap());
    assert_eq!(v.n_tokens, 151_936);
    assert_eq!(v.bos, Some(l["bos"].as_u64().unwrap() as u32));
    assert_eq!(v.eos, Some(l["eos"].as_u64().unwrap() as u32));
    assert_eq!(v.pad, Some(l["pad"].as_u64().unwrap() as u32));
    assert!(!v.add_bos);
    let template = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat/qwen3_chat_template.jinja"),
    )
    .unwrap();
    assert_eq!(v.chat_template.as_deref(), Some(template.as_str()));
    // 151,643 normal tokens, 26 added, the rest unused padding.
    assert_eq!(v.tokenizer.vocab.n_tokens(), 151_643);
    assert_eq!(v.tokenizer.added.len(), 26);
}

#[test]
fn ids_are_llama_cpps_and_decode_back() {
    let tok = &from_file().tokenizer;
    let cases = expected()["cases"].as_array().unwrap();
    assert!(cases.len() > 300);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want = ids(&c["ids"]);
        assert_eq!(tok.encode(text).unwrap(), want, "{text:?}");
        assert_eq!(
            tok.decode(&want).unwrap(),
            c["decoded"].as_str().unwrap(),
            "{text:?}"
        );
        assert!(c["decoded_is_text"].as_bool().unwrap());
        assert_eq!(tok.decode(&want).unwrap(), text);
    }
}

#[test]
fn equals_the_crates_qwen_tokenizer() {
    let tok = &from_file().tokenizer;
    // llama.cpp does not normalise: compare with the tiktoken vocabulary's raw ids, and
    // with the NFC one where the text is already NFC.
    let mut raw = Tokenizer::qwen().unwrap();
    let nfc = Tokenizer::qwen().unwrap();
    raw.nfc = false;
    let mut differ_by_nfc = 0;
    for c in expected()["cases"].as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        let ours = tok.encode(text).unwrap();
        assert_eq!(ours, raw.encode(text).unwrap(), "{text:?}");
        if ours != nfc.encode(text).unwrap() {
            differ_by_nfc += 1;
        }
    }
    // Exactly the non-NFC cases of tests/fixtures/tokenizer/encode.json (its ids vs hf_ids).
    assert_eq!(differ_by_nfc, 10);
    for id in [0u32, 220, 151_642, 151_643, 151_667] {
        assert_eq!(tok.token_bytes(id).unwrap(), raw.token_bytes(id).unwrap());
    }
    assert!(
        tok.token_bytes(151_700).is_err(),
        "unused ids have no token"
    );
}

/// Our writer's keys equal the fixture file's (the converter's layout), and the round trip
/// through GgufWriter and the parser gives the same tokenizer.
#[test]
fn writer_matches_the_file_and_round_trips() {
    let g = file();
    let qwen = Tokenizer::qwen().unwrap();
    let template = g.get("tokenizer.chat_template").and_then(MetaValue::as_str);
    let ours = gguf_vocab::gguf_tokenizer_metadata_for(&qwen, 151_936, template).unwrap();
    for (k, v) in &ours {
        let theirs = g.get(k).unwrap_or_else(|| panic!("{k} not in the fixture"));
        match (v, theirs) {
            (MetaValue::Array(a), MetaValue::Array(b)) => {
                assert_eq!(a.len(), b.len(), "{k}");
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    let same = x == y || (x.as_u64().is_some() && x.as_u64() == y.as_u64());
                    assert!(same, "{k}[{i}]: ours {x:?}, file {y:?}");
                }
            }
            _ => assert!(
                v == theirs || (v.as_u64().is_some() && v.as_u64() == theirs.as_u64()),
                "{k}: ours {v:?}, file {theirs:?}"
            ),
        }
    }
    assert!(qwen.n_ids() == 151_669);
    assert!(gguf_vocab::gguf_tokenizer_metadata_for(&qwen, 1000, None).is_err());
    let mut odd = Tokenizer::qwen().unwrap();
    odd.pattern = r"\w+".to_string();
    let e = gguf_vocab::gguf_tokenizer_metadata_for(&odd, 151_936, None).unwrap_err();
    assert!(e.to_string().contains("pre_tokenizer"), "{e}");

    let mut bytes = Vec::new();
    let w = GgufWriter::new(&mut bytes, ours, Vec::new(), 32).unwrap();
    w.finish().unwrap();
    let parsed = parse(Path::new("written.gguf"), &bytes).unwrap();
    let back = tokenizer_from_metadata(Path::new("written.gguf"), &parsed.metadata).unwrap();
    for c in expected()["cases"].as_array().unwrap().iter().step_by(7) {
        let text = c["text"].as_str().unwrap();
        assert_eq!(
            back.tokenizer.encode(text).unwrap(),
            ids(&c["ids"]),
            "{text:?}"
        );
    }
}

// ---- malformed metadata: errors naming the key, never panics ----

fn s(x: &str) -> MetaValue {
    MetaValue::Str(x.to_string())
}

/// A small valid vocabulary: the 256 bytes, "ab", "abc", a control and an unused token.
fn small() -> Vec<(String, MetaValue)> {
    let b2u = bytes_to_unicode();
    let mut toks: Vec<MetaValue> = (0..256).map(|b| s(&b2u[b].to_string())).collect();
    let mut types = vec![MetaValue::I32(1); 256];
    for (t, ty) in [("ab", 1), ("abc", 1), ("<|end|>", 3), ("[PAD259]", 5)] {
        toks.push(s(t));
        types.push(MetaValue::I32(ty));
    }
    vec![
        ("general.architecture".into(), s("qwen3")),
        (MODEL_KEY.into(), s("gpt2")),
        (PRE_KEY.into(), s("qwen2")),
        (TOKENS_KEY.into(), MetaValue::Array(toks)),
        (TYPES_KEY.into(), MetaValue::Array(types)),
        (
            MERGES_KEY.into(),
            MetaValue::Array(vec![s("a b"), s("ab c")]),
        ),
        (BOS_KEY.into(), MetaValue::U32(258)),
        (EOS_KEY.into(), MetaValue::U32(258)),
    ]
}

fn set(m: &mut Vec<(String, MetaValue)>, key: &str, v: Option<MetaValue>) {
    m.retain(|(k, _)| k != key);
    if let Some(v) = v {
        m.push((key.to_string(), v));
    }
}

fn array_mut<'a>(m: &'a mut [(String, MetaValue)], key: &str) -> &'a mut Vec<MetaValue> {
    match m.iter_mut().find(|(k, _)| k == key) {
        Some((_, MetaValue::Array(a))) => a,
        _ => panic!("{key}"),
    }
}

fn error(m: &[(String, MetaValue)]) -> String {
    match tokenizer_from_metadata(Path::new("bad.gguf"), m) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

/// A file whose embedding has another number of rows than the vocabulary has tokens.
#[test]
fn embedding_rows_must_match_the_tokens() {
    use llm_anatomy::quant::GgmlType;
    let dir = crate::common::scratch("gguf-vocab-rows");
    let write = |rows: u64| {
        let path = dir.join(format!("gguf_vocab_rows_{rows}.gguf"));
        let tensors = vec![(
            "token_embd.weight".to_string(),
            vec![4, rows],
            GgmlType::F32,
        )];
        let mut w =
            GgufWriter::new(std::fs::File::create(&path).unwrap(), small(), tensors, 32).unwrap();
        w.write_tensor("token_embd.weight", &vec![0u8; 16 * rows as usize])
            .unwrap();
        w.finish().unwrap();
        path
    };
    let good = write(260);
    assert_eq!(gguf_vocab::open(&good).unwrap().n_tokens, 260);
    let bad = write(250);
    let e = gguf_vocab::open(&bad).err().unwrap().to_string();
    assert!(
        e.contains("token_embd.weight") && e.contains("250 rows"),
        "{e}"
    );
}

#[test]
fn small_vocabulary_works() {
    let v = tokenizer_from_metadata(Path::new("ok.gguf"), &small()).unwrap();
    assert_eq!(v.n_tokens, 260);
    assert_eq!(
        v.tokenizer.encode("xabc<|end|>").unwrap(),
        vec![120, 257, 258]
    );
    assert_eq!(v.tokenizer.decode(&[257, 258]).unwrap(), "abc<|end|>");
}

#[test]
fn malformed_metadata_is_an_error_naming_the_key() {
    type Edit = Box<dyn Fn(&mut Vec<(String, MetaValue)>)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|m| set(m, MODEL_KEY, None)),
            "tokenizer.ggml.model",
        ),
        (
            Box::new(|m| set(m, MODEL_KEY, Some(s("none")))),
            "no vocabulary",
        ),
        (Box::new(|m| set(m, MODEL_KEY, Some(s("bert")))), "\"gpt2\""),
        // A SentencePiece vocabulary needs its scores.
        (
            Box::new(|m| set(m, MODEL_KEY, Some(s("llama")))),
            "tokenizer.ggml.scores",
        ),
        (
            Box::new(|m| set(m, MODEL_KEY, Some(MetaValue::U8(1)))),
            "tokenizer.ggml.model",
        ),
        (
            Box::new(|m| set(m, PRE_KEY, Some(s("llama-bpe")))),
            "tokenizer.ggml.pre",
        ),
        (Box::new(|m| set(m, PRE_KEY, None)), "tokenizer.ggml.pre"),
        (
            Box::new(|m| set(m, TOKENS_KEY, None)),
            "tokenizer.ggml.tokens",
        ),
        (
            Box::new(|m| set(m, TOKENS_KEY, Some(s("x")))),
            "tokenizer.ggml.tokens",
        ),
        (
            Box::new(|m| set(m, TOKENS_KEY, Some(MetaValue::Array(vec![])))),
            "empty",
        ),
        (
            Box::new(|m| array_mut(m, TOKENS_KEY)[7] = MetaValue::U32(7)),
            "tokenizer.ggml.tokens[7]",
        ),
        (
            Box::new(|m| array_mut(m, TOKENS_KEY)[256] = s("a b")),
            "tokenizer.ggml.tokens[256]",
        ),
        (
            Box::new(|m| array_mut(m, TOKENS_KEY)[257] = s("ab")),
            "tokenizer.ggml.tokens[257]",
        ),
        (
            Box::new(|m| array_mut(m, TOKENS_KEY)[65] = s("ab")),
            "tokenizer.ggml.tokens",
        ),
        (
            Box::new(|m| {
                array_mut(m, TYPES_KEY).pop();
            }),
            "259 entries for 260 tokens",
        ),
        (
            Box::new(|m| array_mut(m, TYPES_KEY)[3] = MetaValue::I32(9)),
            "tokenizer.ggml.token_type[3]",
        ),
        (
            Box::new(|m| array_mut(m, TYPES_KEY)[3] = MetaValue::I32(-1)),
            "tokenizer.ggml.token_type[3]",
        ),
        (
            Box::new(|m| array_mut(m, TYPES_KEY)[3] = MetaValue::I32(6)),
            "tokenizer.ggml.token_type[3]",
        ),
        (
            Box::new(|m| array_mut(m, TYPES_KEY)[3] = s("1")),
            "tokenizer.ggml.token_type[3]",
        ),
        (
            Box::new(|m| set(m, TYPES_KEY, Some(MetaValue::U32(1)))),
            "tokenizer.ggml.token_type",
        ),
        (
            Box::new(|m| set(m, MERGES_KEY, None)),
            "tokenizer.ggml.merges",
        ),
        (
            Box::new(|m| array_mut(m, MERGES_KEY)[1] = s("abc")),
            "tokenizer.ggml.merges[1]",
        ),
        (
            Box::new(|m| array_mut(m, MERGES_KEY)[1] = s("ab  c")),
            "tokenizer.ggml.merges[1]",
        ),
        (
            Box::new(|m| array_mut(m, MERGES_KEY)[1] = s("ab zz")),
            "tokenizer.ggml.merges[1]",
        ),
        (
            Box::new(|m| array_mut(m, MERGES_KEY)[0] = s("b a")),
            "tokenizer.ggml.merges[0]",
        ),
        (
            Box::new(|m| array_mut(m, MERGES_KEY)[1] = s("ab <|end|>")),
            "tokenizer.ggml.merges[1]",
        ),
        (
            Box::new(|m| array_mut(m, MERGES_KEY)[0] = MetaValue::Bool(true)),
            "tokenizer.ggml.merges[0]",
        ),
        (
            Box::new(|m| set(m, BOS_KEY, Some(MetaValue::U32(261)))),
            "tokenizer.ggml.bos_token_id",
        ),
        (
            Box::new(|m| set(m, EOS_KEY, Some(MetaValue::I32(-1)))),
            "tokenizer.ggml.eos_token_id",
        ),
        (
            Box::new(|m| set(m, PAD_KEY, Some(s("0")))),
            "tokenizer.ggml.padding_token_id",
        ),
        (
            Box::new(|m| set(m, "tokenizer.ggml.add_bos_token", Some(MetaValue::U8(1)))),
            "add_bos_token",
        ),
        (
            Box::new(|m| set(m, "tokenizer.chat_template", Some(MetaValue::U8(1)))),
            "chat_template",
        ),
        (
            Box::new(|m| set(m, "qwen3.vocab_size", Some(MetaValue::U32(300)))),
            "qwen3.vocab_size",
        ),
        (
            Box::new(|m| array_mut(m, TOKENS_KEY)[258] = s("")),
            "tokenizer.ggml.tokens[258]",
        ),
        (
            Box::new(|m| {
                array_mut(m, TOKENS_KEY)[259] = s("<|end|>");
                array_mut(m, TYPES_KEY)[259] = MetaValue::I32(4);
            }),
            "tokenizer.ggml.tokens[259]",
        ),
    ];
    for (i, (edit, want)) in cases.into_iter().enumerate() {
        let mut m = small();
        edit(&mut m);
        let e = error(&m);
        assert!(e.contains(want), "case {i}: {e:?} does not name {want:?}");
        assert!(
            e.contains("bad.gguf"),
            "case {i}: {e:?} does not name the file"
        );
    }
}

/// Every value of every key replaced by values of other types, one at a time, and every
/// array cut short: Ok or Err, never a panic.
#[test]
fn no_panic_on_any_metadata() {
    let replacements = [
        MetaValue::U8(0),
        MetaValue::I64(-5),
        MetaValue::U64(u64::MAX),
        MetaValue::F32(f32::NAN),
        MetaValue::Bool(true),
        s(""),
        s("gpt2"),
        MetaValue::Array(vec![]),
        MetaValue::Array(vec![MetaValue::Array(vec![s("a")])]),
        MetaValue::Array(vec![MetaValue::I32(i32::MIN); 3]),
    ];
    let base = small();
    for k in 0..base.len() {
        for r in &replacements {
            let mut m = base.clone();
            m[k].1 = r.clone();
            let _ = tokenizer_from_metadata(Path::new("x.gguf"), &m);
        }
        if let MetaValue::Array(a) = &base[k].1 {
            for cut in [0, 1, a.len() / 2, a.len().saturating_sub(1)] {
                let mut m = base.clone();
                m[k].1 = MetaValue::Array(a[..cut].to_vec());
                let _ = tokenizer_from_metadata(Path::new("x.gguf"), &m);
            }
        }
    }
}

fn meta_value() -> impl proptest::strategy::Strategy<Value = MetaValue> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        any::<u8>().prop_map(MetaValue::U8),
        any::<i32>().prop_map(MetaValue::I32),
        any::<u64>().prop_map(MetaValue::U64),
        any::<i64>().prop_map(MetaValue::I64),
        any::<f32>().prop_map(MetaValue::F32),
        any::<bool>().prop_map(MetaValue::Bool),
        "\\PC{0,6}|[a-cĠ ]{0,4}|<\\|[a-z]{0,3}\\|>".prop_map(MetaValue::Str),
    ];
    leaf.prop_recursive(2, 64, 16, |inner| {
        prop::collection::vec(inner, 0..16).prop_map(MetaValue::Array)
    })
}

/// `back` is `text` with some bytes of `lost` left out, and nothing else changed.
fn loses_only(text: &[u8], back: &[u8], lost: &[u8]) -> bool {
    let mut rest = back.iter().peekable();
    for b in text {
        if rest.peek() == Some(&b) {
            rest.next();
        } else if !lost.contains(b) {
            return false;
        }
    }
    rest.next().is_none()
}

/// A byte with no token is left out of the ids (as llama.cpp leaves it out) and reported
/// by `bytes_without_token`; every other byte still round-trips.
#[test]
fn a_byte_without_a_token_is_reported_and_left_out() {
    let mut meta = small();
    let MetaValue::Array(tokens) = &mut meta[3].1 else {
        panic!("small()'s fourth key is the token list")
    };
    tokens[usize::from(b'e')] = s("<||>");
    let v = tokenizer_from_metadata(Path::new("p.gguf"), &meta).unwrap();
    let ids = v.tokenizer.encode("be a bee").unwrap();
    assert_eq!(v.tokenizer.decode(&ids).unwrap(), "b a b");
    assert_eq!(v.tokenizer.bytes_without_token("be a bee"), b"e");
    assert!(v.tokenizer.bytes_without_token("ab c").is_empty());
    assert!(!loses_only(b"abc", b"ac", b"c"), "only a lost byte may go");
    assert!(loses_only(b"abc", b"ab", b"c"));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any value under any tokenizer key, or an element of an array replaced: Ok or Err,
    /// never a panic; and a vocabulary that loads encodes and decodes its own text back,
    /// but for the bytes it reports having no token for, which only those may lose.
    #[test]
    fn arbitrary_tokenizer_metadata_never_panics(
        key in 0usize..8,
        value in meta_value(),
        index in 0usize..300,
        element in meta_value(),
        text in "[abc<|end> x]{0,12}",
    ) {
        let mut whole = small();
        whole[key].1 = value;
        let _ = tokenizer_from_metadata(Path::new("p.gguf"), &whole);
        let mut one = small();
        if let MetaValue::Array(a) = &mut one[key].1 {
            let i = index % a.len();
            a[i] = element;
        }
        if let Ok(v) = tokenizer_from_metadata(Path::new("p.gguf"), &one) {
            let ids = v.tokenizer.encode(&text).unwrap();
            let back = v.tokenizer.decode(&ids).unwrap();
            let lost = v.tokenizer.bytes_without_token(&text);
            if lost.is_empty() {
                proptest::prop_assert_eq!(back, text);
            } else {
                proptest::prop_assert!(
                    loses_only(text.as_bytes(), back.as_bytes(), &lost),
                    "{text:?} came back as {back:?}; bytes without a token: {lost:?}"
                );
            }
        }
    }
}
