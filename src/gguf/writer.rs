//! The streaming GGUF writer: the header and every tensor info at once (sizes from the
//! types, offsets aligned), then each tensor's bytes in the declared order, each padded to
//! the alignment. For the same metadata (same key order), tensors and alignment it writes
//! the bytes gguf-py's `GGUFWriter` writes (tests/gguf.rs checks it on gguf-py's files).
//!
//! An empty array keeps no element type in [`MetaValue`]; it is written as an array of
//! u8 (gguf-py refuses to write empty arrays at all).

use super::parse::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_NAME_BYTES};
use super::{MetaValue, parse::value_type};
use crate::error::{Error, Result, excerpt};
use crate::quant::GgmlType;
use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;

/// A GGUF file being written to `W`.
pub struct GgufWriter<W: Write> {
    out: W,
    /// Each tensor's name and size in bytes, in the declared order.
    tensors: Vec<(String, u64)>,
    /// How many of them have been written.
    written: usize,
    alignment: u64,
}

fn invalid(detail: String) -> Error {
    Error::Invalid(format!("GGUF writer: {detail}"))
}

fn write_error(source: std::io::Error) -> Error {
    Error::Write {
        path: PathBuf::from("GGUF output"),
        source,
    }
}

/// Writes `n` zero bytes (padding: less than the alignment, which may be up to 2^31).
fn write_zeros(out: &mut impl Write, mut n: u64) -> Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let k = n.min(ZEROS.len() as u64);
        out.write_all(&ZEROS[..k as usize]).map_err(write_error)?;
        n -= k;
    }
    Ok(())
}

impl<W: Write> GgufWriter<W> {
    /// Checks the content and writes the header, the metadata and the tensor infos.
    /// `tensors` are `(name, dims in ggml order, type)`; `alignment` must be a power of two
    /// and, unless it is 32, given as the u32 `general.alignment` in `metadata` as well.
    pub fn new(
        mut out: W,
        metadata: Vec<(String, MetaValue)>,
        tensors: Vec<(String, Vec<u64>, GgmlType)>,
        alignment: u64,
    ) -> Result<GgufWriter<W>> {
        if !alignment.is_power_of_two() || alignment > u64::from(u32::MAX) {
            return Err(invalid(format!(
                "alignment {alignment} is not a power of two that fits a u32"
            )));
        }
        let declared = metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY);
        match declared {
            Some((_, MetaValue::U32(a))) if u64::from(*a) == alignment => {}
            None if alignment == DEFAULT_ALIGNMENT => {}
            _ => {
                return Err(invalid(format!(
                    "alignment {alignment}, but the metadata has `{ALIGNMENT_KEY}` = {declared:?}: a reader would use that"
                )));
            }
        }
        let mut header = Vec::new();
        header.extend_from_slice(super::parse::MAGIC);
        header.extend_from_slice(&3u32.to_le_bytes());
        header.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        let mut keys = HashSet::new();
        for (key, value) in &metadata {
            if key.is_empty() || !keys.insert(key.as_str()) {
                return Err(invalid(format!(
                    "metadata key {} is empty or given twice",
                    excerpt(key)
                )));
            }
            put_string(&mut header, key);
            header.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut header, key, value, 0)?;
        }
        let mut names = HashSet::new();
        let mut sizes = Vec::with_capacity(tensors.len());
        let mut offset = 0u64;
        for (name, dims, ty) in &tensors {
            let bad = |why: String| invalid(format!("tensor {}: {why}", excerpt(name)));
            if name.is_empty() || name.len() >= MAX_NAME_BYTES || !names.insert(name.as_str()) {
                return Err(bad(format!(
                    "a name must be unique, non-empty and under {MAX_NAME_BYTES} bytes"
                )));
            }
            if dims.len() > MAX_DIMS {
                return Err(bad(format!(
                    "{} dimensions, more than {MAX_DIMS}",
                    dims.len()
                )));
            }
            let ne0 = dims.first().copied().unwrap_or(1);
            let nonzero = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d.max(1)));
            let size = nonzero
                .filter(|&n| n <= i64::MAX as u64)
                .map(|_| dims.iter().product::<u64>())
                .and_then(|n| {
                    let rows = n.checked_div(ne0).unwrap_or(0);
                    ty.row_bytes(ne0)?.checked_mul(rows)
                })
                .ok_or_else(|| {
                    bad(format!(
                        "dims {dims:?} are too large or rows not whole {} blocks",
                        ty.name()
                    ))
                })?;
            put_string(&mut header, name);
            header.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&ty.id().to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
            offset = size
                .checked_next_multiple_of(alignment)
                .and_then(|s| offset.checked_add(s))
                .ok_or_else(|| bad("the data section passes 2^64 bytes".to_string()))?;
            sizes.push((name.clone(), size));
        }
        let pad = (header.len() as u64).next_multiple_of(alignment) - header.len() as u64;
        out.write_all(&header).map_err(write_error)?;
        write_zeros(&mut out, pad)?;
        Ok(GgufWriter {
            out,
            tensors: sizes,
            written: 0,
            alignment,
        })
    }

    /// Writes the next tensor's bytes (it must be the next declared, of its exact size),
    /// then zeros up to the alignment.
    pub fn write_tensor(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let Some((expected, size)) = self.tensors.get(self.written) else {
            return Err(invalid(format!(
                "tensor {} written, but all {} declared tensors are",
                excerpt(name),
                self.tensors.len()
            )));
        };
        if expected != name {
            return Err(invalid(format!(
                "tensor {} written where {} comes next",
                excerpt(name),
                excerpt(expected)
            )));
        }
        if bytes.len() as u64 != *size {
            return Err(invalid(format!(
                "tensor {}: {} bytes given, {size} declared",
                excerpt(name),
                bytes.len()
            )));
        }
        let pad = size.next_multiple_of(self.alignment) - size;
        self.out.write_all(bytes).map_err(write_error)?;
        write_zeros(&mut self.out, pad)?;
        self.written += 1;
        Ok(())
    }

    /// Checks that every declared tensor was written, flushes, and returns the output.
    pub fn finish(mut self) -> Result<W> {
        if let Some((name, _)) = self.tensors.get(self.written) {
            return Err(invalid(format!(
                "finished with tensor {} ({} of {}) not written",
                excerpt(name),
                self.written + 1,
                self.tensors.len()
            )));
        }
        self.out.flush().map_err(write_error)?;
        Ok(self.out)
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A value's bytes (without its type id, which the caller writes).
fn put_value(out: &mut Vec<u8>, key: &str, v: &MetaValue, depth: usize) -> Result<()> {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(b) => out.push(u8::from(*b)),
        MetaValue::Str(s) => put_string(out, s),
        MetaValue::Array(items) => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(invalid(format!(
                    "metadata {}: arrays nested more than {MAX_ARRAY_DEPTH} deep",
                    excerpt(key)
                )));
            }
            let elem = items.first().map_or(value_type::U8, MetaValue::type_id);
            if items.iter().any(|i| i.type_id() != elem) {
                return Err(invalid(format!(
                    "metadata {}: an array of values of different types",
                    excerpt(key)
                )));
            }
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            // An element that is an array is its element type, count and elements: the
            // outer array's element type (9) stands for its type id.
            for item in items {
                put_value(out, key, item, depth + 1)?;
            }
        }
    }
    Ok(())
}
