//! Chapter 12 — the training data (source S0 5.4, 5.6): a corpus of plain-text documents
//! turned into one stream of Qwen token ids, a held-out part for evaluation, and the
//! random windows a training step reads.
//!
//! A corpus is a directory of UTF-8 `.txt` files (searched recursively, in sorted path
//! order); each file is one document. Every document is tokenized as plain text (a literal
//! `<|endoftext|>` inside it stays characters, as tiktoken's `encode_ordinary` does) and ended
//! with the `<|endoftext|>` token, so the model learns where documents stop and no window
//! pretends two documents are one text without a boundary. The held-out split is by whole
//! document, chosen by a hash of the document's path: the same corpus gives the same split
//! on every machine, and adding a document does not move the others. `scripts/build-corpus.sh`
//! makes the project's corpus (data/corpus/, provenance in data/PROVENANCE.md).

use crate::error::{Error, Result, read_bounded};
use crate::limits::TEXT_FILE_BYTES;
use crate::tokenizer::Tokenizer;
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// The token that ends every document.
pub const END_OF_TEXT: &str = "<|endoftext|>";
/// Bytes of text a corpus may hold in all (its token stream is held in memory).
pub const CORPUS_BYTES: u64 = 2 << 30;
/// Directory levels searched below the corpus directory.
const MAX_DEPTH: usize = 16;

/// One document of the corpus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorpusSource {
    /// Its path relative to the corpus directory (`en/book-ch04-01-what-is-ownership.txt`).
    pub path: PathBuf,
    pub bytes: usize,
    /// Tokens it contributed, its closing `<|endoftext|>` included.
    pub tokens: usize,
    /// In the held-out stream rather than the training stream.
    pub heldout: bool,
}

/// A tokenized corpus: documents in path order, each ended with `<|endoftext|>`.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub train: Vec<u32>,
    pub heldout: Vec<u32>,
    pub sources: Vec<CorpusSource>,
}

/// Reads every `.txt` file under `dir`, tokenizes it with `tok` and splits the documents
/// into training and held-out streams; about `heldout_fraction` of the documents (at
/// least one when the fraction is above 0 and there are two or more documents, never all
/// of them) are held out.
pub fn load_corpus(dir: &Path, tok: &Tokenizer, heldout_fraction: f64) -> Result<Corpus> {
    if !(0.0..1.0).contains(&heldout_fraction) {
        return Err(Error::Invalid(format!(
            "held-out fraction {heldout_fraction}: must be at least 0 and below 1"
        )));
    }
    let end = tok.added.id_of(END_OF_TEXT).ok_or_else(|| {
        Error::Invalid(format!(
            "tokenizer {}: has no {END_OF_TEXT} token",
            tok.name
        ))
    })?;
    let mut files = Vec::new();
    collect_txt(dir, dir, 0, &mut files)?;
    if files.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no .txt files in the corpus directory",
            dir.display()
        )));
    }
    files.sort();
    let texts = read_texts(dir, &files)?;

    // Documents are tokenized side by side (each one sequentially: a document is small).
    let ids: Vec<Vec<u32>> = texts
        .par_iter()
        .map(|t| tok.encode_ordinary(t))
        .collect::<Result<_>>()?;
    let heldout = heldout_documents(&files, heldout_fraction);
    let mut corpus = Corpus {
        train: Vec::new(),
        heldout: Vec::new(),
        sources: Vec::with_capacity(files.len()),
    };
    for (((path, text), doc), held) in files.into_iter().zip(&texts).zip(ids).zip(heldout) {
        let stream = if held {
            &mut corpus.heldout
        } else {
            &mut corpus.train
        };
        stream.extend_from_slice(&doc);
        stream.push(end);
        corpus.sources.push(CorpusSource {
            path,
            bytes: text.len(),
            tokens: doc.len() + 1,
            heldout: held,
        });
    }
    Ok(corpus)
}

/// The `.txt` files under `dir` (relative paths). Symbolic links to directories are not
/// followed (no loops); a link to a file is read like the file.
fn collect_txt(root: &Path, dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
    let io = |path: &Path, source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    if depth > MAX_DEPTH {
        return Err(Error::Invalid(format!(
            "{}: corpus directories nested more than {MAX_DEPTH} levels deep",
            dir.display()
        )));
    }
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let entry = entry.map_err(|e| io(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| io(&path, e))?;
        if kind.is_dir() {
            collect_txt(root, &path, depth + 1, out)?;
        } else if path.extension().is_some_and(|e| e == "txt") && !kind.is_dir() {
            // strip_prefix cannot fail: `path` was built by joining onto `root`.
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// Every file's text; bounded per file and in total; non-UTF-8 is an error naming the
/// file and the byte where it stops being UTF-8.
fn read_texts(root: &Path, files: &[PathBuf]) -> Result<Vec<String>> {
    let mut total: u64 = 0;
    let mut texts = Vec::with_capacity(files.len());
    for rel in files {
        let path = root.join(rel);
        let bytes = read_bounded(&path, TEXT_FILE_BYTES, "corpus text file")?;
        total = total.saturating_add(bytes.len() as u64);
        if total > CORPUS_BYTES {
            return Err(Error::Invalid(format!(
                "{}: the corpus holds more than {CORPUS_BYTES} bytes of text (at {})",
                root.display(),
                rel.display()
            )));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            Error::Invalid(format!(
                "{}: not UTF-8 text (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ))
        })?;
        texts.push(text);
    }
    Ok(texts)
}

/// FNV-1a, 64 bits: a hash that is the same on every machine and Rust version.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Which documents are held out: those whose path hashes below the fraction, adjusted so
/// that (with two or more documents and a fraction above 0) at least one document is held
/// out and at least one is not.
fn heldout_documents(files: &[PathBuf], fraction: f64) -> Vec<bool> {
    // Paths are hashed with '/' separators so the split does not depend on the OS.
    let hashes: Vec<u64> = files
        .iter()
        .map(|p| {
            let parts: Vec<String> = p
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            fnv1a(parts.join("/").as_bytes())
        })
        .collect();
    let cut = fraction * 2f64.powi(64);
    let mut held: Vec<bool> = hashes.iter().map(|&h| (h as f64) < cut).collect();
    if fraction > 0.0 && files.len() >= 2 {
        let lowest = (0..files.len()).min_by_key(|&i| hashes[i]).unwrap_or(0);
        let highest = (0..files.len()).max_by_key(|&i| hashes[i]).unwrap_or(0);
        held[lowest] = true;
        held[highest] = false;
    }
    held
}

/// splitmix64: one step of a small, fixed, well-mixed generator (the batch windows must be
/// the same on every machine and with every version of the `rand` crate).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The batch of training step `step`: `batch_size` windows of `seq_len` consecutive tokens
/// each, starting at positions drawn uniformly from every possible start; the same
/// (`step`, `seed`) gives the same batch. (The model predicts each window's tokens from
/// the ones before, so a window of `seq_len` tokens trains `seq_len − 1` predictions.)
/// When `tokens` is shorter than `seq_len`, every window is all of `tokens`; an empty
/// stream, `batch_size` 0 or `seq_len` 0 give an empty batch. Check the sizes up front with
/// [`check_batch_shape`].
pub fn batch(
    tokens: &[u32],
    batch_size: usize,
    seq_len: usize,
    step: u64,
    seed: u64,
) -> Vec<Vec<u32>> {
    if tokens.is_empty() || batch_size == 0 || seq_len == 0 {
        return Vec::new();
    }
    let len = seq_len.min(tokens.len());
    let starts = (tokens.len() - len + 1) as u64;
    // One independent stream per (seed, step): mix both into the state.
    let mut state = seed ^ splitmix64(&mut step.wrapping_mul(0xd134_2543_de82_ef95));
    (0..batch_size)
        .map(|_| {
            // Multiply-shift maps 64 random bits onto 0..starts (bias below 2^-40 here).
            let start = ((u128::from(splitmix64(&mut state)) * u128::from(starts)) >> 64) as usize;
            tokens[start..start + len].to_vec()
        })
        .collect()
}

/// Checks that a token stream (named by `what`, e.g. "the held-out stream") can give
/// windows of `seq_len` tokens with at least one prediction each.
pub fn check_batch_shape(
    what: &str,
    tokens: usize,
    batch_size: usize,
    seq_len: usize,
) -> Result<()> {
    if batch_size == 0 {
        return Err(Error::Invalid(
            "batch size 0: need at least one sequence".into(),
        ));
    }
    if seq_len < 2 {
        return Err(Error::Invalid(format!(
            "sequence length {seq_len}: need at least 2 tokens (one to read, one to predict)"
        )));
    }
    if tokens < seq_len {
        return Err(Error::Invalid(format!(
            "{what}: {tokens} tokens, fewer than one window of {seq_len}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    fn qwen() -> &'static Tokenizer {
        static TOK: OnceLock<Tokenizer> = OnceLock::new();
        TOK.get_or_init(|| Tokenizer::qwen().unwrap())
    }

    /// An empty directory, removed with its contents when dropped (pass or fail).
    fn tmp(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("anatomy-corpus-{tag}-"))
            .tempdir()
            .unwrap()
    }

    fn small_corpus(tag: &str) -> tempfile::TempDir {
        let dir = tmp(tag);
        let d = dir.path();
        std::fs::create_dir_all(d.join("en")).unwrap();
        std::fs::create_dir_all(d.join("zh")).unwrap();
        for i in 0..20 {
            let text = format!("Document {i}: ownership moves values; borrowing lends them.\n");
            std::fs::write(d.join("en").join(format!("doc-{i:02}.txt")), text).unwrap();
        }
        std::fs::write(d.join("zh/poem.txt"), "床前明月光，疑是地上霜。\n").unwrap();
        std::fs::write(d.join("notes.md"), "not a .txt file").unwrap();
        dir
    }

    #[test]
    fn documents_end_with_endoftext_and_split_is_deterministic() {
        let dir = small_corpus("split");
        let d = dir.path();
        let a = load_corpus(d, qwen(), 0.2).unwrap();
        let b = load_corpus(d, qwen(), 0.2).unwrap();
        assert_eq!(a.sources, b.sources);
        assert_eq!((&a.train, &a.heldout), (&b.train, &b.heldout));
        assert_eq!(a.sources.len(), 21, "the .md file is not a document");
        assert!(a.sources.windows(2).all(|w| w[0].path < w[1].path));
        let held = a.sources.iter().filter(|s| s.heldout).count();
        assert!((1..21).contains(&held), "{held} held out");
        let end = qwen().added.id_of(END_OF_TEXT).unwrap();
        let docs = |stream: &[u32]| stream.iter().filter(|&&t| t == end).count();
        assert_eq!(docs(&a.heldout), held);
        assert_eq!(docs(&a.train), 21 - held);
        assert_eq!(a.train.last(), Some(&end));
        let tokens: usize = a.sources.iter().map(|s| s.tokens).sum();
        assert_eq!(tokens, a.train.len() + a.heldout.len());
        // The poem's ids are the tokenizer's, followed by <|endoftext|>.
        let poem = a
            .sources
            .iter()
            .find(|s| s.path.ends_with("poem.txt"))
            .unwrap();
        assert_eq!(
            poem.tokens,
            qwen().encode("床前明月光，疑是地上霜。\n").unwrap().len() + 1
        );
        // No held-out fraction: everything trains.
        let all = load_corpus(d, qwen(), 0.0).unwrap();
        assert!(all.heldout.is_empty() && all.sources.iter().all(|s| !s.heldout));
    }

    #[test]
    fn literal_special_tokens_in_text_stay_text() {
        let d = tmp("literal");
        std::fs::write(d.path().join("a.txt"), "say <|endoftext|> here").unwrap();
        let c = load_corpus(d.path(), qwen(), 0.0).unwrap();
        let end = qwen().added.id_of(END_OF_TEXT).unwrap();
        assert_eq!(c.train.iter().filter(|&&t| t == end).count(), 1);
    }

    #[test]
    fn bad_corpora_are_clear_errors() {
        let parent = tmp("missing");
        let missing = parent.path().join("anatomy-corpus-no-such-dir");
        let err = load_corpus(&missing, qwen(), 0.1).unwrap_err().to_string();
        assert!(err.contains("anatomy-corpus-no-such-dir"), "{err}");

        let empty = tmp("empty");
        std::fs::write(empty.path().join("readme.md"), "x").unwrap();
        let err = load_corpus(empty.path(), qwen(), 0.1)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no .txt files") && err.contains("anatomy-corpus-empty"),
            "{err}"
        );

        let bad = tmp("utf8");
        std::fs::write(bad.path().join("good.txt"), "fine").unwrap();
        std::fs::write(bad.path().join("latin1.txt"), b"caf\xe9").unwrap();
        let err = load_corpus(bad.path(), qwen(), 0.1)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("latin1.txt") && err.contains("not UTF-8") && err.contains("offset 3"),
            "{err}"
        );

        for f in [-0.1, 1.0, f64::NAN] {
            let err = load_corpus(bad.path(), qwen(), f).unwrap_err().to_string();
            assert!(err.contains("held-out fraction"), "{err}");
        }
    }

    #[test]
    fn batches_are_windows_in_range_and_reproducible() {
        let tokens: Vec<u32> = (0..1000).collect();
        let a = batch(&tokens, 8, 64, 3, 42);
        assert_eq!(a, batch(&tokens, 8, 64, 3, 42), "same step and seed");
        assert_ne!(a, batch(&tokens, 8, 64, 4, 42), "another step");
        assert_ne!(a, batch(&tokens, 8, 64, 3, 43), "another seed");
        assert_eq!(a.len(), 8);
        for w in &a {
            assert_eq!(w.len(), 64);
            // Consecutive tokens of the stream (the stream is 0, 1, 2, …).
            assert!(w.windows(2).all(|p| p[1] == p[0] + 1), "{w:?}");
            assert!(*w.last().unwrap() < 1000);
        }
        // Every start is reachable, the last one included, and none past it.
        let short: Vec<u32> = (0..10).collect();
        let mut starts = std::collections::BTreeSet::new();
        for step in 0..200 {
            for w in batch(&short, 4, 8, step, 7) {
                starts.insert(w[0]);
            }
        }
        assert_eq!(starts.into_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
        // Degenerate sizes give what the documentation says.
        assert_eq!(
            batch(&short, 2, 50, 0, 0),
            vec![short.clone(), short.clone()]
        );
        assert!(batch(&[], 2, 4, 0, 0).is_empty());
        assert!(batch(&short, 0, 4, 0, 0).is_empty());
        assert!(check_batch_shape("train", 10, 2, 8).is_ok());
        assert!(
            check_batch_shape("train", 5, 2, 8)
                .unwrap_err()
                .to_string()
                .contains("train: 5 tokens")
        );
        assert!(check_batch_shape("train", 10, 2, 1).is_err());
        assert!(check_batch_shape("train", 10, 0, 4).is_err());
    }

    /// The project's corpus (scripts/build-corpus.sh), when present: sizes and the time
    /// tokenizing it takes. `cargo test --lib train::data -- --nocapture` prints them.
    #[test]
    fn project_corpus_tokenizes_in_seconds() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/corpus");
        if !dir.is_dir() {
            eprintln!("data/corpus absent (scripts/build-corpus.sh makes it): skipped");
            return;
        }
        let start = std::time::Instant::now();
        let c = load_corpus(&dir, qwen(), 0.05).unwrap();
        let seconds = start.elapsed().as_secs_f64();
        for lang in ["en", "zh"] {
            let docs: Vec<&CorpusSource> = c
                .sources
                .iter()
                .filter(|s| s.path.starts_with(lang))
                .collect();
            let bytes: usize = docs.iter().map(|s| s.bytes).sum();
            let tokens: usize = docs.iter().map(|s| s.tokens).sum();
            let held = docs.iter().filter(|s| s.heldout).count();
            eprintln!(
                "{lang}: {} documents ({held} held out), {bytes} bytes, {tokens} tokens",
                docs.len()
            );
        }
        eprintln!(
            "total: {} train + {} held-out tokens in {seconds:.2} s",
            c.train.len(),
            c.heldout.len()
        );
        assert!(!c.heldout.is_empty() && !c.train.is_empty());
    }
}
