//! Tests of the safetensors reader on files built by hand.

use super::*;

/// A safetensors file built by hand: `tensors` are (name, dtype, shape, bytes).
fn build(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)], pad: usize) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape,
                "data_offsets": [data.len(), data.len() + bytes.len()]}),
        );
        data.extend_from_slice(bytes);
    }
    let mut h = serde_json::to_vec(&Value::Object(header)).unwrap();
    h.extend(std::iter::repeat_n(b' ', pad));
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// An empty directory, removed with its contents when dropped (pass or fail).
fn tmp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("anatomy-ckpt-{tag}-"))
        .tempdir()
        .unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn misaligned_tensors_are_copied_and_read_right() {
    let w = [1.5f32, -2.0, 3.25, 4.0, 0.5, -0.125];
    let b: Vec<u8> = w
        .iter()
        .flat_map(|x| bf16::from_f32(*x).to_bits().to_le_bytes())
        .collect();
    // Pads of 0..4 bytes shift the data section off 4-byte alignment.
    for pad in 0..4 {
        let scratch = tmp(&format!("align{pad}"));
        let dir = scratch.path();
        let file = build(
            &[
                ("one", "U8", vec![1], vec![7]),
                ("w", "F32", vec![2, 3], f32_bytes(&w)),
                ("h", "BF16", vec![3, 2], b.clone()),
            ],
            pad,
        );
        write(dir, "model.safetensors", &file);
        let c = Checkpoint::open(dir).unwrap();
        let m = c.matrix("w", 2, 3).unwrap();
        let mut out = [0.0f32; 2];
        m.matvec(&[1.0, 1.0, 1.0], &mut out);
        assert_eq!(out, [2.75, 4.375]);
        assert_eq!(c.to_f32("h").unwrap(), (w.to_vec(), vec![3, 2]));
        assert!(c.matrix("one", 1, 1).is_err());
    }
}

/// Callers can tell the kinds of fault apart without reading the message.
#[test]
fn problems_are_typed() {
    let w = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let good = build(&[("w", "F32", vec![2, 3], w.clone())], 0);
    let problem = |bytes: &[u8], tag: &str| {
        let scratch = tmp(tag);
        write(scratch.path(), "model.safetensors", bytes);
        let opened = Checkpoint::open(scratch.path()).and_then(|c| c.matrix("w", 3, 2).map(|_| ()));
        match opened {
            Err(Error::Checkpoint {
                problem, tensor, ..
            }) => (problem, tensor),
            other => panic!("{tag}: expected a checkpoint error, got {other:?}"),
        }
    };
    let (p, _) = problem(&good[..good.len() - 4], "typed-trunc");
    assert!(matches!(p, CheckpointProblem::Truncated(_)), "{p:?}");
    let (p, _) = problem(&good[..6], "typed-short");
    assert!(matches!(p, CheckpointProblem::Truncated(_)), "{p:?}");
    let (p, t) = problem(&good, "typed-shape");
    assert_eq!(
        p,
        CheckpointProblem::Shape {
            found: vec![2, 3],
            expected: vec![3, 2]
        }
    );
    assert_eq!(t.as_deref(), Some("w"));
    let wrong_dtype = build(&[("w", "I32", vec![3, 2], w.clone())], 0);
    let (p, _) = problem(&wrong_dtype, "typed-dtype");
    assert!(matches!(p, CheckpointProblem::Dtype { .. }), "{p:?}");
    let missing = build(&[("v", "F32", vec![2, 3], w)], 0);
    assert_eq!(
        problem(&missing, "typed-missing").0,
        CheckpointProblem::Missing
    );
}

#[test]
fn row_block_cuts_a_fused_tensor() {
    let v: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let m = Matrix::f32(&v, 6, 4);
    let b = row_block(&m, 2, 3);
    let mut row = [0.0f32; 4];
    b.row_into(0, &mut row);
    assert_eq!(row, [8.0, 9.0, 10.0, 11.0]);
    assert_eq!((b.rows, b.cols), (3, 4));
}
