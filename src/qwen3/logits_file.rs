//! The logits of a forward call written as a safetensors file (`anatomy logits --out`).

use crate::error::Result;
use crate::qwen3::model::Output;
use std::path::Path;

/// Writes logits as a safetensors file with one tensor `"logits"`, F32 `[rows, vocab]`:
/// the header (padded with spaces to a multiple of 8 bytes, as the `safetensors` crate
/// writes it), then the numbers streamed out, so no second copy of them is made. Through
/// [`crate::output::write_output`]: a regular file is replaced atomically, a device or FIFO
/// written through, a symbolic link or directory refused. A failed write is not the
/// input's fault: it exits 1, not 2.
pub fn save_logits(path: &Path, out: &Output, vocab: usize) -> Result<()> {
    let n = out
        .rows
        .checked_mul(vocab)
        .filter(|&n| n == out.logits.len());
    let Some(n) = n else {
        return Err(crate::Error::Invalid(format!(
            "logits tensor: {} values for shape [{}, {vocab}]",
            out.logits.len(),
            out.rows
        )));
    };
    let mut header = format!(
        r#"{{"logits":{{"dtype":"F32","shape":[{},{vocab}],"data_offsets":[0,{}]}}}}"#,
        out.rows,
        4 * n as u128
    )
    .into_bytes();
    header.resize(header.len().div_ceil(8) * 8, b' ');
    crate::output::write_output(path, |w| {
        w.write_all(&(header.len() as u64).to_le_bytes())?;
        w.write_all(&header)?;
        let mut buf = Vec::with_capacity(4 * 4096);
        for chunk in out.logits.chunks(4096) {
            buf.clear();
            buf.extend(chunk.iter().flat_map(|x| x.to_le_bytes()));
            w.write_all(&buf)?;
        }
        Ok(())
    })
}
