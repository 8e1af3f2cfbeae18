//! The one way the real-model tests find their GGUF files (`target/real-models`, fetched by
//! `bash scripts/get-real-models.sh`): present, or one line saying which test skipped and
//! how to fetch the file.

use std::path::PathBuf;

/// The file `file` under `target/real-models`, or `None` after one line saying that `test`
/// is skipped and how to fetch it.
pub fn real_model_path(file: &str, test: &str) -> Option<PathBuf> {
    let path = llm_anatomy::claims::real_kl::models_dir().join(file);
    if path.is_file() {
        return Some(path);
    }
    eprintln!(
        "skipped {test}: {} is absent (fetch it with `bash scripts/get-real-models.sh`)",
        path.display()
    );
    None
}
