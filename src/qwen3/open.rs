//! Opening MODEL — a Hugging Face directory or a GGUF file — and the tokenizer and glitch
//! screens that go with it.

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::qwen3::config::Qwen3Config;
use crate::qwen3::tensors::{ModelFile, Tensors};
use crate::qwen3::{gguf_config, gguf_names};
use std::path::Path;

/// Opens MODEL: a Hugging Face directory (`config.json` and the safetensors beside it) or a
/// single `.gguf` file (the config read from its metadata, [`gguf_config`]). Build the
/// model with `Model::new(config, &file)`.
pub fn open(path: &Path) -> Result<(Qwen3Config, ModelFile)> {
    let gguf_name = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if gguf_name || (path.is_file() && is_gguf(path)) {
        let g = crate::gguf::Gguf::open(path)?;
        let config = gguf_config::config_from_gguf(&g)?;
        return Ok((config, ModelFile::Gguf(g)));
    }
    if !path.is_dir() {
        let what = match std::fs::metadata(path) {
            Ok(m) => format!(
                "is a {}, not a model directory or .gguf file",
                crate::error::kind_name(m.file_type())
            ),
            Err(_) => "no such model directory or .gguf file".to_string(),
        };
        return Err(crate::Error::Invalid(format!("{}: {what}", path.display())));
    }
    let config = Qwen3Config::from_file(&path.join("config.json"))?;
    let ckpt = Checkpoint::open(path)?;
    Ok((config, ModelFile::Safetensors(ckpt)))
}

/// `anatomy glitch`'s report (chapter 4's screens) with the embedding screens of `model`
/// when given: a Hugging Face checkpoint directory, or a GGUF file (`token_embd.weight`,
/// and `output.weight` unless the head is tied).
pub fn glitch_report(
    tok: &crate::tokenizer::Tokenizer,
    model: Option<&Path>,
    k: usize,
    unused: Option<Vec<u32>>,
) -> Result<crate::tokenizer::glitch::GlitchReport> {
    use crate::tokenizer::glitch;
    let Some(path) = model.filter(|p| is_gguf(p)) else {
        return glitch::report(tok, model, k, unused);
    };
    let mut report = glitch::report(tok, None, k, unused.clone())?;
    let (config, file) = open(path)?;
    let src = Tensors::from(&file);
    let (v, h) = (config.vocab_size, config.hidden_size);
    let what = |hf: &str| {
        let name = gguf_names::to_gguf(hf).map_or_else(|| hf.to_string(), |g| g.name);
        format!("{}: tensor `{name}`", path.display())
    };
    let embed = src.matrix("model.embed_tokens.weight", v, h)?;
    let unembed = match src.contains("lm_head.weight") {
        true => Some(src.matrix("lm_head.weight", v, h)?),
        false => None,
    };
    let unembed_what = what("lm_head.weight");
    report.checkpoint = Some(glitch::screen_matrices(
        &path.display().to_string(),
        (&what("model.embed_tokens.weight"), &embed),
        unembed.as_ref().map(|m| (unembed_what.as_str(), m)),
        tok,
        k,
        unused,
    )?);
    Ok(report)
}

/// Whether MODEL names a GGUF file: a path ending in `.gguf` (whatever it is: opening it
/// then says what is wrong), or a regular file that starts with GGUF's magic.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return true;
    }
    let mut magic = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
        && &magic == b"GGUF"
}

/// Where the bundled tiny checkpoint lives.
pub fn bundled_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/tiny-qwen3-moe")
}
