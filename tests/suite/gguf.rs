//! GGUF files (chapters 9 and 11): our reader reads what gguf-py's GGUFReader reads from
//! files gguf-py's GGUFWriter wrote (scripts/gen_gguf_reader_fixtures.py), our writer
//! rewrites each of them byte for byte, and every kind of bad input is a named error.

use llm_anatomy::gguf::{Gguf, GgufWriter, MetaValue, parse};
use llm_anatomy::quant::GgmlType;
use llm_anatomy::{CheckpointProblem, Error};
use serde_json::Value;
use std::path::{Path, PathBuf};

const FIXTURES: [&str; 3] = ["values", "quant", "empty"];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_reader")
}

fn fixture(name: &str) -> (PathBuf, Vec<u8>, Value) {
    let path = fixture_dir().join(format!("{name}.gguf"));
    let bytes = std::fs::read(&path).unwrap();
    let json = std::fs::read_to_string(fixture_dir().join(format!("{name}.json"))).unwrap();
    (path, bytes, serde_json::from_str(&json).unwrap())
}

/// Our value against what the script gave gguf-py's writer: the type by name, the element
/// type of arrays, the value (nested arrays kept nested).
fn check_written(key: &str, ours: &MetaValue, ty: &str, sub: Option<&str>, v: &Value) {
    assert_eq!(ours.type_name(), ty, "{key}");
    match ours {
        MetaValue::Array(items) => {
            let want = v.as_array().unwrap();
            assert_eq!(items.len(), want.len(), "{key}");
            for (item, w) in items.iter().zip(want) {
                // gguf-py types an element by its Python type unless a sub type is given.
                let ty = match (sub, w) {
                    (Some(s), _) => s,
                    (None, Value::String(_)) => "STRING",
                    (None, Value::Array(_)) => "ARRAY",
                    (None, Value::Bool(_)) => "BOOL",
                    (None, Value::Number(n)) if n.is_f64() => "FLOAT32",
                    (None, _) => "INT32",
                };
                check_written(key, item, ty, None, w);
            }
        }
        MetaValue::Str(s) => assert_eq!(s, v.as_str().unwrap(), "{key}"),
        MetaValue::Bool(b) => assert_eq!(*b, v.as_bool().unwrap(), "{key}"),
        MetaValue::F32(x) => assert_eq!(*x, v.as_f64().unwrap() as f32, "{key}"),
        MetaValue::F64(_) => assert!(leaf_matches(ours, v), "{key}"),
        MetaValue::I8(_) | MetaValue::I16(_) | MetaValue::I32(_) | MetaValue::I64(_) => {
            let want = v.as_i64().unwrap();
            assert_eq!(ours.as_f64().unwrap(), want as f64, "{key}");
            assert_eq!(int_of(ours), i128::from(want), "{key}");
        }
        _ => assert_eq!(ours.as_u64(), v.as_u64(), "{key}"),
    }
}

fn int_of(v: &MetaValue) -> i128 {
    match *v {
        MetaValue::I8(x) => x.into(),
        MetaValue::I16(x) => x.into(),
        MetaValue::I32(x) => x.into(),
        MetaValue::I64(x) => x.into(),
        _ => v.as_u64().unwrap().into(),
    }
}

/// The leaves of a value (gguf-py's `contents()` flattens nested arrays).
fn leaves<'a>(v: &'a MetaValue, out: &mut Vec<&'a MetaValue>) {
    match v {
        MetaValue::Array(items) => items.iter().for_each(|i| leaves(i, out)),
        leaf => out.push(leaf),
    }
}

/// A leaf against gguf-py's reading of it. serde_json (without `float_roundtrip`) may
/// parse a float one unit in the last place off, so floats are compared within that.
fn leaf_matches(v: &MetaValue, read: &Value) -> bool {
    let close = |a: f64, b: f64| a == b || ((a - b) / a).abs() < 1e-15;
    match v {
        MetaValue::Str(s) => read.as_str() == Some(s),
        MetaValue::Bool(b) => read.as_bool() == Some(*b),
        MetaValue::F32(x) => read.as_f64().is_some_and(|r| r as f32 == *x),
        MetaValue::F64(x) => read.as_f64().is_some_and(|r| close(r, *x)),
        other => match other.as_u64() {
            Some(u) => read.as_u64() == Some(u),
            None => read.as_i64().map(i128::from) == Some(int_of(other)),
        },
    }
}

#[test]
fn reads_what_gguf_py_reads() {
    for name in FIXTURES {
        let (path, bytes, doc) = fixture(name);
        let g = Gguf::open(&path).unwrap();
        assert_eq!(u64::from(g.version()), doc["version"].as_u64().unwrap());
        assert_eq!(g.alignment(), doc["alignment"].as_u64().unwrap(), "{name}");
        assert_eq!(g.file_size(), doc["file_size"].as_u64().unwrap());
        assert_eq!(g.file_size(), bytes.len() as u64);
        if !g.tensors().is_empty() {
            assert_eq!(
                g.data_offset(),
                doc["data_offset"].as_u64().unwrap(),
                "{name}"
            );
        }
        // Keys in file order, each as written and as gguf-py read it.
        let written = doc["written"].as_array().unwrap();
        let fields = doc["fields"].as_array().unwrap();
        assert_eq!(g.metadata().len(), written.len(), "{name}");
        assert_eq!(g.metadata().len(), fields.len(), "{name}");
        for (((key, ours), w), f) in g.metadata().iter().zip(written).zip(fields) {
            assert_eq!(key, w["key"].as_str().unwrap());
            assert_eq!(key, f["key"].as_str().unwrap());
            assert_eq!(g.get(key), Some(ours));
            let sub = w["sub_type"].as_str();
            check_written(key, ours, w["type"].as_str().unwrap(), sub, &w["value"]);
            let read_types: Vec<&str> = f["read_types"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            assert_eq!(read_types[0], ours.type_name(), "{key}");
            let mut ls = Vec::new();
            leaves(ours, &mut ls);
            let leaf_type = *read_types.last().unwrap();
            // gguf-py's reader takes the first inner array's type for all of them; where
            // they differ (t.arr.nested_mixed) its flattened contents are not the values.
            if ls.iter().all(|l| l.type_name() == leaf_type) {
                let read = match &f["read"] {
                    Value::Array(a) => a.clone(),
                    one => vec![one.clone()],
                };
                assert_eq!(ls.len(), read.len(), "{key}");
                for (l, r) in ls.iter().zip(&read) {
                    assert!(leaf_matches(l, r), "{key}: {l:?} read by gguf-py as {r}");
                }
            } else {
                assert_eq!(key, "t.arr.nested_mixed");
            }
        }
        let tensors = doc["tensors"].as_array().unwrap();
        assert_eq!(g.tensors().len(), tensors.len());
        for (t, want) in g.tensors().iter().zip(tensors) {
            assert_eq!(t.name, want["name"].as_str().unwrap());
            assert_eq!(g.tensor(&t.name), Some(t));
            let dims: Vec<u64> = want["dims"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(t.dims, dims, "{}", t.name);
            let rev: Vec<usize> = dims.iter().rev().map(|&d| d as usize).collect();
            assert_eq!(t.shape(), rev);
            assert_eq!(u64::from(t.ty.id()), want["type"].as_u64().unwrap());
            assert_eq!(
                t.ty.name().to_uppercase(),
                want["type_name"].as_str().unwrap().to_uppercase()
            );
            assert_eq!(t.offset, want["relative_offset"].as_u64().unwrap());
            assert_eq!(t.size, want["n_bytes"].as_u64().unwrap(), "{}", t.name);
            let start = want["data_offset"].as_u64().unwrap() as usize;
            assert_eq!(g.data(t), &bytes[start..start + t.size as usize]);
        }
    }
}

/// Our writer, given what our reader read, writes gguf-py's bytes.
fn rewrite(bytes: &[u8]) -> Vec<u8> {
    let p = parse(Path::new("mem.gguf"), bytes).unwrap();
    let infos = p
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone(), t.ty))
        .collect();
    let mut w = GgufWriter::new(Vec::new(), p.metadata.clone(), infos, p.alignment).unwrap();
    for t in &p.tensors {
        let start = (p.data_offset + t.offset) as usize;
        w.write_tensor(&t.name, &bytes[start..start + t.size as usize])
            .unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn writer_rewrites_gguf_py_files_byte_for_byte() {
    for name in FIXTURES {
        let (_, bytes, _) = fixture(name);
        let ours = rewrite(&bytes);
        assert_eq!(ours.len(), bytes.len(), "{name}");
        assert!(ours == bytes, "{name}: first difference at byte {:?}", {
            ours.iter().zip(&bytes).position(|(a, b)| a != b)
        });
    }
}

#[test]
fn writer_refuses_what_it_cannot_write_faithfully() {
    let md = |a: u64| vec![("general.alignment".to_string(), MetaValue::U64(a))];
    let t = |dims: Vec<u64>, ty| vec![("w".to_string(), dims, ty)];
    let errs = [
        GgufWriter::new(Vec::new(), vec![], vec![], 3).err(),
        GgufWriter::new(Vec::new(), md(64), vec![], 64).err(),
        GgufWriter::new(Vec::new(), vec![], vec![], 64).err(),
        GgufWriter::new(Vec::new(), vec![], t(vec![33], GgmlType::Q8_0), 32).err(),
        GgufWriter::new(Vec::new(), vec![], t(vec![1; 5], GgmlType::F32), 32).err(),
        GgufWriter::new(Vec::new(), vec![], t(vec![u64::MAX, 2], GgmlType::F32), 32).err(),
        GgufWriter::new(
            Vec::new(),
            vec![(
                "k".into(),
                MetaValue::Array(vec![MetaValue::U8(1), MetaValue::I8(1)]),
            )],
            vec![],
            32,
        )
        .err(),
        GgufWriter::new(
            Vec::new(),
            vec![
                ("k".into(), MetaValue::U8(1)),
                ("k".into(), MetaValue::U8(2)),
            ],
            vec![],
            32,
        )
        .err(),
    ];
    for (i, e) in errs.iter().enumerate() {
        assert!(matches!(e, Some(Error::Invalid(_))), "case {i}: {e:?}");
    }
    let mut w = GgufWriter::new(Vec::new(), vec![], t(vec![4], GgmlType::F32), 32).unwrap();
    assert!(w.write_tensor("v", &[0; 16]).is_err());
    assert!(w.write_tensor("w", &[0; 15]).is_err());
    let w2 = GgufWriter::new(Vec::new(), vec![], t(vec![4], GgmlType::F32), 32).unwrap();
    assert!(w2.finish().is_err());
    w.write_tensor("w", &[0; 16]).unwrap();
    assert!(w.write_tensor("w", &[0; 16]).is_err());
    let out = w.finish().unwrap();
    let p = parse(Path::new("x"), &out).unwrap();
    assert_eq!(p.tensors[0].size, 16);
}

#[test]
fn version_2_is_read_and_version_1_refused() {
    let (_, mut bytes, _) = fixture("quant");
    bytes[4] = 2;
    assert_eq!(parse(Path::new("v2.gguf"), &bytes).unwrap().version, 2);
    for (v, says) in [
        (1u32, "version 1 is not supported"),
        (0, "version 0"),
        (3 << 24, "byte-swapped"),
        (4, "newer"),
    ] {
        bytes[4..8].copy_from_slice(&v.to_le_bytes());
        let e = parse(Path::new("v.gguf"), &bytes).unwrap_err().to_string();
        assert!(e.starts_with("v.gguf: ") && e.contains(says), "{v}: {e}");
    }
}

fn problem(e: &Error) -> &CheckpointProblem {
    match e {
        Error::Checkpoint { problem, .. } => problem,
        other => panic!("not a checkpoint error: {other}"),
    }
}

#[test]
fn every_truncation_is_named_as_such() {
    for name in FIXTURES {
        let (_, bytes, doc) = fixture(name);
        // Only the last tensor's padding may go: a file cut anywhere before its last byte
        // of data (or of the header, without tensors) is truncated.
        let needed = match doc["tensors"].as_array().unwrap().last() {
            Some(t) => t["data_offset"].as_u64().unwrap() + t["n_bytes"].as_u64().unwrap(),
            // Without tensors the header may lose its padding.
            None => (0..bytes.len())
                .find(|&n| parse(Path::new("x"), &bytes[..n]).is_ok())
                .unwrap() as u64,
        };
        assert!(needed > 24, "{name}");
        for n in 0..bytes.len() {
            let r = parse(Path::new("cut.gguf"), &bytes[..n]);
            if (n as u64) < needed {
                let e = r.unwrap_err();
                assert!(
                    matches!(problem(&e), CheckpointProblem::Truncated(_)),
                    "{name} cut at {n}: {e}"
                );
                assert!(e.to_string().len() < 400, "{e}");
            } else {
                assert!(r.is_ok(), "{name} cut at {n}: {:?}", r.err());
            }
        }
    }
}

/// A GGUF file built field by field, so each field can lie.
#[derive(Default)]
struct Build(Vec<u8>);

impl Build {
    fn header(version: u32, tensors: u64, kvs: u64) -> Build {
        let mut b = Build(b"GGUF".to_vec());
        b.u32(version).u64(tensors).u64(kvs);
        b
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    /// A tensor info.
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Zero padding to `align`, then `n` data bytes.
    fn data(&mut self, align: usize, n: usize) -> &mut Self {
        let pad = self.0.len().next_multiple_of(align) - self.0.len();
        self.0.extend(std::iter::repeat_n(0u8, pad + n));
        self
    }
    fn err(&self) -> String {
        let e = parse(Path::new("bad.gguf"), &self.0).expect_err("a bad file was accepted");
        let s = e.to_string();
        assert!(s.starts_with("bad.gguf: "), "{s}");
        assert!(s.len() < 500, "a long message: {s}");
        s
    }
}

fn says(b: &Build, parts: &[&str]) {
    let e = b.err();
    for p in parts {
        assert!(e.contains(p), "{e:?} does not say {p:?}");
    }
}

#[test]
fn lying_counts_and_lengths_are_refused_before_they_size_anything() {
    says(
        &Build::header(3, 0, 1 << 60),
        &["metadata count 1152921504606846976", "truncated"],
    );
    says(
        &Build::header(3, u64::MAX, 0),
        &["tensor count", "truncated"],
    );
    let mut b = Build::header(3, 0, 1);
    b.u64(1 << 62).raw(&[b'k'; 32]);
    says(&b, &["length 4611686018427387904", "limit"]);
    let mut b = Build::header(3, 0, 1);
    b.u64(1000).raw(&[b'k'; 32]);
    says(
        &b,
        &["key of metadata pair 0", "needs 1000 bytes", "truncated"],
    );
    let mut b = Build::header(3, 0, 1);
    b.str("k").u32(8).u64(1 << 20).raw(b"abc");
    says(&b, &["value of \"k\"", "truncated"]);
    // An array of 2^40 u64s in a small file; an array of 2^31 u8.
    let mut b = Build::header(3, 0, 1);
    b.str("arr").u32(9).u32(10).u64(1 << 40).u64(0);
    says(
        &b,
        &["\"arr\"", "1099511627776 elements", "limit of 1073741824"],
    );
    let mut b = Build::header(3, 0, 1);
    b.str("arr").u32(9).u32(10).u64(1 << 29).u64(0);
    says(
        &b,
        &[
            "\"arr\"",
            "536870912 elements",
            "hold at most 1",
            "truncated",
        ],
    );
    let mut b = Build::header(3, 0, 1);
    b.str("arr").u32(9).u32(0).u64(1 << 31);
    says(&b, &["\"arr\"", "limit"]);
    // Nested arrays: too deep, and an array of a billion empty arrays.
    let mut b = Build::header(3, 0, 1);
    b.str("deep").u32(9);
    for _ in 0..20 {
        b.u32(9).u64(1);
    }
    b.u32(0).u64(0);
    says(&b, &["\"deep\"", "nested more than 8 deep"]);
    let mut b = Build::header(3, 0, 1);
    b.str("bomb").u32(9).u32(9).u64(1 << 29);
    for _ in 0..100 {
        b.u32(0).u64(0);
    }
    says(&b, &["\"bomb\"", "truncated"]);
    // Element count across the file.
    let mut b = Build::header(3, 0, 1);
    b.str("many")
        .u32(9)
        .u32(0)
        .u64(1 << 25)
        .raw(&vec![0; 1 << 25]);
    says(&b, &["\"many\"", "16777216 metadata values"]);
}

#[test]
fn bad_metadata_is_named_by_key() {
    let mut b = Build::header(3, 0, 1);
    b.str("general.weird").u32(13).u64(0);
    says(&b, &["\"general.weird\"", "unknown metadata value type 13"]);
    let mut b = Build::header(3, 0, 1);
    b.str("a").u32(9).u32(77).u64(1);
    says(&b, &["\"a\"", "type 77 of array elements"]);
    let mut b = Build::header(3, 0, 2);
    b.str("dup").u32(0).raw(&[1]).str("dup").u32(0).raw(&[2]);
    says(&b, &["\"dup\" appears twice"]);
    let mut b = Build::header(3, 0, 1);
    b.str("").u32(0).raw(&[1; 32]);
    says(&b, &["empty key"]);
    let mut b = Build::header(3, 0, 1);
    b.str("flag").u32(7).raw(&[2]);
    says(&b, &["\"flag\"", "bool of byte 2"]);
    let mut b = Build::header(3, 0, 1);
    b.str("s").u32(8).u64(2).raw(&[0xff, 0xfe]);
    says(&b, &["value of \"s\"", "not UTF-8"]);
    let mut b = Build::header(3, 0, 1);
    b.u64(2).raw(&[0xc3, 0x28]).u32(0).raw(&[0]);
    says(&b, &["key of metadata pair 0", "not UTF-8"]);
    for (a, what) in [
        (0u32, "0, not a power of two"),
        (3, "3, not a power of two"),
    ] {
        let mut b = Build::header(3, 0, 1);
        b.str("general.alignment").u32(4).u32(a);
        says(&b, &["general.alignment", what]);
    }
    let mut b = Build::header(3, 0, 1);
    b.str("general.alignment").u32(10).u64(32);
    says(&b, &["general.alignment", "must be a u32, not UINT64"]);
    let mut b = Build::header(3, 0, 0);
    b.0[0] = b'g';
    says(&b, &["not a GGUF file"]);
}

fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Build {
    let mut b = Build::header(3, 1, 0);
    b.tensor("blk.0.w", dims, ty, offset).data(32, data);
    b
}

#[test]
fn bad_tensor_infos_are_named_by_tensor() {
    assert!(parse(Path::new("ok"), &one_tensor(&[4, 2], 0, 0, 32).0).is_ok());
    says(
        &one_tensor(&[1; 5], 0, 0, 4),
        &["`blk.0.w`", "5 dimensions", "at most 4"],
    );
    says(
        &one_tensor(&[1 << 63], 0, 0, 4),
        &["`blk.0.w`", "past 2^63 - 1"],
    );
    says(
        &one_tensor(&[1 << 32, 1 << 32], 0, 0, 4),
        &["`blk.0.w`", "elements"],
    );
    says(
        &one_tensor(&[0, 1 << 62, 4], 0, 0, 4),
        &["`blk.0.w`", "elements"],
    );
    says(
        &one_tensor(&[1 << 61, 2], 0, 0, 4),
        &["`blk.0.w`", "2^64 bytes"],
    );
    says(
        &one_tensor(&[256], 16, 0, 66),
        &[
            "`blk.0.w`",
            "type 16 (iq2_xxs) is not supported",
            "supported are f32, f16",
            "q4_K",
        ],
    );
    says(&one_tensor(&[256], 11, 0, 110), &["type 11 (q3_K)"]);
    says(&one_tensor(&[4], 99, 0, 16), &["type 99 (not a ggml type)"]);
    says(
        &one_tensor(&[33], 8, 0, 64),
        &["`blk.0.w`", "33 elements per row", "q8_0 blocks of 32"],
    );
    says(
        &one_tensor(&[4, 2], 0, 0, 31),
        &["`blk.0.w`", "32 bytes at offset 0", "truncated"],
    );
    says(
        &one_tensor(&[4, 2], 0, 32, 64),
        &["`blk.0.w`", "offset 32 leaves a gap"],
    );
    says(
        &one_tensor(&[4, 2], 0, 8, 64),
        &[
            "`blk.0.w`",
            "offset 8 is not a multiple of the alignment 32",
        ],
    );
    says(&one_tensor(&[4, 2], 0, u64::MAX - 31, 64), &["`blk.0.w`"]);
    let mut b = Build::header(3, 1, 0);
    b.tensor("w", &[4], 0, 0);
    says(&b, &["data section starts at offset 64", "truncated"]);
    let long = "x".repeat(64);
    let mut b = Build::header(3, 1, 0);
    b.tensor(&long, &[4], 0, 0).data(32, 16);
    says(&b, &["a name of 64 bytes", "GGML_MAX_NAME"]);
    let mut b = Build::header(3, 1, 0);
    b.tensor("", &[4], 0, 0).data(32, 16);
    says(&b, &["tensor 0 has an empty name"]);
    let mut b = Build::header(3, 2, 0);
    b.tensor("a", &[4], 0, 0)
        .tensor("a", &[4], 0, 32)
        .data(32, 64);
    says(&b, &["tensor `a`", "appears again"]);
    let mut b = Build::header(3, 2, 0);
    b.tensor("a", &[16], 0, 0)
        .tensor("b", &[4], 0, 32)
        .data(32, 96);
    says(&b, &["tensor `b`", "overlaps tensor `a`"]);
    // Non-default alignment: offsets and the data section follow it.
    let mut b = Build::header(3, 2, 1);
    b.str("general.alignment").u32(4).u32(16);
    b.tensor("a", &[1], 0, 0)
        .tensor("b", &[1], 0, 16)
        .data(16, 20);
    let p = parse(Path::new("ok"), &b.0).unwrap();
    assert_eq!(
        (p.alignment, p.data_offset % 16, p.tensors[1].offset),
        (16, 0, 16)
    );
    let mut b = Build::header(3, 2, 1);
    b.str("general.alignment").u32(4).u32(16);
    b.tensor("a", &[1], 0, 0)
        .tensor("b", &[1], 0, 32)
        .data(16, 36);
    says(&b, &["tensor `b`", "gap"]);
}

#[test]
fn zero_sized_tensors_and_scalars_are_read() {
    let mut b = Build::header(3, 3, 0);
    b.tensor("empty", &[0, 5], 0, 0)
        .tensor("scalar", &[], 0, 0)
        .tensor("q", &[0], 8, 32)
        .data(32, 36);
    let p = parse(Path::new("ok"), &b.0).unwrap();
    let sizes: Vec<u64> = p.tensors.iter().map(|t| t.size).collect();
    assert_eq!(sizes, [0, 4, 0]);
    assert_eq!(p.tensors[1].shape(), Vec::<usize>::new());
}

#[test]
fn typed_getters_name_the_file_and_key() {
    let (path, _, _) = fixture("values");
    let g = Gguf::open(&path).unwrap();
    assert_eq!(g.get_u64("t.u8").unwrap(), Some(200));
    assert_eq!(g.get_u64("t.i8").ok(), None, "negative is not a u64");
    assert_eq!(g.require_u64("t.u64").unwrap(), 18_000_000_000_000_000_000);
    assert_eq!(g.get_f64("t.f64").unwrap(), Some(-1.0e-300));
    assert_eq!(g.get_f64("t.i32").unwrap(), Some(-2.0e9));
    assert_eq!(
        g.require_str("general.architecture").unwrap(),
        "anatomy-test"
    );
    assert_eq!(g.get_str("no.such.key").unwrap(), None);
    assert_eq!(
        g.get("t.bool.true").and_then(MetaValue::as_bool),
        Some(true)
    );
    let n = g
        .get("t.arr.strings")
        .and_then(MetaValue::as_array)
        .map(<[_]>::len);
    assert_eq!(n, Some(4));
    let e = g.get_u64("t.string").unwrap_err().to_string();
    assert!(
        e.contains("values.gguf") && e.contains("`t.string`") && e.contains("STRING"),
        "{e}"
    );
    let e = g.require_str("no.such.key").unwrap_err().to_string();
    assert!(e.contains("`no.such.key`: missing"), "{e}");
    let e = g.get_str("t.arr.i32").unwrap_err().to_string();
    assert!(e.contains("ARRAY of 3 elements, expected a string"), "{e}");
}

#[cfg(unix)]
#[test]
fn fifos_devices_and_directories_are_refused_quickly() {
    let dir = crate::common::scratch("gguf");
    let started = std::time::Instant::now();
    let e = Gguf::open(&dir).unwrap_err().to_string();
    assert!(e.contains("directory"), "{e}");
    let e = Gguf::open(Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(e.contains("character device"), "{e}");
    let fifo = dir.join("model.gguf");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let e = Gguf::open(&fifo).unwrap_err().to_string();
    assert!(e.contains("FIFO"), "{e}");
    let short = dir.join("short.gguf");
    std::fs::write(&short, b"GGUF").unwrap();
    let e = Gguf::open(&short).unwrap_err().to_string();
    assert!(e.contains("too short"), "{e}");
    assert!(started.elapsed().as_secs() < 5);
}
