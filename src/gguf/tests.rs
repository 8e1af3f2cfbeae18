use super::*;
use crate::quant::ALL_TYPES;

#[test]
fn ggml_names_agree_with_the_quant_table() {
    for t in ALL_TYPES {
        assert_eq!(ggml_type_name(t.id()), Some(t.name()));
    }
    assert_eq!(ggml_type_name(4), None, "q4_2 was removed from ggml");
    assert_eq!(ggml_type_name(16), Some("iq2_xxs"));
    assert_eq!(ggml_type_name(43), None);
}

#[test]
fn values_convert_only_when_exact() {
    assert_eq!(MetaValue::I32(-1).as_u64(), None);
    assert_eq!(MetaValue::I64(7).as_u64(), Some(7));
    assert_eq!(MetaValue::U8(3).as_f64(), Some(3.0));
    assert_eq!(MetaValue::F32(0.5).as_u64(), None);
    assert_eq!(MetaValue::Str("x".into()).as_str(), Some("x"));
    assert_eq!(MetaValue::Bool(true).as_bool(), Some(true));
    assert_eq!(MetaValue::U8(1).as_bool(), None);
    let a = MetaValue::Array(vec![MetaValue::U8(1)]);
    assert_eq!(a.as_array().map(<[_]>::len), Some(1));
}

#[test]
fn written_files_read_back() {
    let metadata = vec![
        (
            "general.architecture".to_string(),
            MetaValue::Str("qwen3".into()),
        ),
        ("general.alignment".to_string(), MetaValue::U32(64)),
        (
            "nested".to_string(),
            MetaValue::Array(vec![
                MetaValue::Array(vec![MetaValue::I64(-1)]),
                MetaValue::Array(vec![]),
            ]),
        ),
    ];
    let tensors = vec![
        ("a".to_string(), vec![32, 2], GgmlType::Q8_0),
        ("b".to_string(), vec![3], GgmlType::F16),
    ];
    let mut w = GgufWriter::new(Vec::new(), metadata.clone(), tensors, 64).unwrap();
    w.write_tensor("a", &[7; 68]).unwrap();
    w.write_tensor("b", &[9; 6]).unwrap();
    let bytes = w.finish().unwrap();
    let p = parse(Path::new("mem"), &bytes).unwrap();
    assert_eq!(p.metadata, metadata);
    assert_eq!((p.alignment, p.data_offset % 64), (64, 0));
    assert_eq!((p.tensors[1].offset, p.tensors[1].size), (128, 6));
    assert_eq!(bytes.len() as u64, p.data_offset + 192);
}
