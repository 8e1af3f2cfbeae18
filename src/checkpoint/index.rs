//! `model.safetensors.index.json`: which shard holds each tensor of a sharded checkpoint.

use super::strict::Strict;
use super::{malformed, tensor_error};
use crate::error::{CheckpointProblem, Result, excerpt};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// Reads `model.safetensors.index.json`: the distinct shard files (in order of first
/// appearance) and the tensor → file map. At most [`crate::limits::JSON_FILE_BYTES`] are
/// read, and only from a regular file.
pub(super) fn read_index(index: &Path) -> Result<(Vec<PathBuf>, BTreeMap<String, PathBuf>)> {
    let bytes = crate::error::read_bounded(index, crate::limits::JSON_FILE_BYTES, "JSON document")?;
    parse_index(&bytes, index)
}

/// Parses an index held in memory; `index` is its path (shards are named relative to its
/// directory, and errors name it). A key given twice in one object is refused, as the
/// safetensors format refuses it; a shard name must be a plain file name.
pub fn parse_index(
    bytes: &[u8],
    index: &Path,
) -> Result<(Vec<PathBuf>, BTreeMap<String, PathBuf>)> {
    let Strict(json) = serde_json::from_slice(bytes)
        .map_err(|e| malformed(index, format!("not valid JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| malformed(index, "no `weight_map` object"))?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut files: Vec<PathBuf> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = BTreeMap::new();
    for (name, file) in map {
        let bad =
            |problem: String| tensor_error(index, name, CheckpointProblem::Malformed(problem));
        let file = file.as_str().ok_or_else(|| {
            bad(format!(
                "weight_map entry is {}, not a file name",
                crate::error::excerpt_json(file)
            ))
        })?;
        if file.is_empty() || file == "." || file == ".." || file.contains(['/', '\\', '\0']) {
            return Err(bad(format!(
                "weight_map entry {}: shard names must be plain file names",
                excerpt(file)
            )));
        }
        let path = dir.join(file);
        if seen.insert(file) {
            files.push(path.clone());
        }
        out.insert(name.clone(), path);
    }
    if files.is_empty() {
        return Err(malformed(index, "`weight_map` is empty"));
    }
    Ok((files, out))
}
