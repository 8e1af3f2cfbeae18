//! Chapter 11 — `anatomy quantize`: the per-tensor type mix and the quantised file, checked
//! against what llama.cpp 0.3.36's own quantiser (`llama_model_quantize`) made of the same
//! two checkpoints (tests/fixtures/quantize/expected-*.json, written by
//! scripts/gen_quantize_fixtures.py; see tests/fixtures/quantize/PROVENANCE.md).

use llm_anatomy::gguf::Gguf;
use llm_anatomy::quant::GgmlType;
use llm_anatomy::quant::mix::{FileType, MixContext, TensorRole, choose_type, estimate_bytes};
use llm_anatomy::qwen3::to_gguf;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fixture of one checkpoint: `("hf" | "tiny", its JSON)`.
fn expected(label: &str) -> Value {
    let path = root().join(format!("tests/fixtures/quantize/expected-{label}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn checkpoint_dir(label: &str) -> PathBuf {
    match label {
        "hf" => root().join("tests/fixtures/quantize/hf"),
        _ => root().join("data/tiny-qwen3-moe"),
    }
}

fn config(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

fn mix_context(label: &str) -> MixContext {
    let cfg = config(&checkpoint_dir(label));
    let n_expert = cfg
        .get("num_experts")
        .or_else(|| cfg.get("num_local_experts"))
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize;
    MixContext {
        n_layer: cfg["num_hidden_layers"].as_u64().unwrap() as usize,
        n_expert,
        tied_embeddings: cfg["tie_word_embeddings"].as_bool().unwrap(),
        is_70b: false,
    }
}

/// ggml dims (innermost first) → row-major shape.
fn shape_of(dims: &Value) -> Vec<usize> {
    let mut s: Vec<usize> = dims
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    s.reverse();
    s
}

/// gguf-py's type name (`"Q4_K"`, `"BF16"`) of one of ours.
fn gguf_py_name(ty: GgmlType) -> String {
    ty.name().to_ascii_uppercase()
}

#[test]
fn mix_gives_llama_cpp_s_type_to_every_tensor() {
    let mut checked = 0;
    for label in ["hf", "tiny"] {
        let exp = expected(label);
        let ctx = mix_context(label);
        for (ftype_name, per_ftype) in exp["ftypes"].as_object().unwrap() {
            let ftype = FileType::from_name(ftype_name).unwrap();
            assert_eq!(
                per_ftype["file_type"].as_u64().unwrap(),
                u64::from(ftype.id())
            );
            for (name, t) in per_ftype["tensors"].as_object().unwrap() {
                let role = TensorRole::from_gguf_name(name);
                let shape = shape_of(&t["dims"]);
                let got = choose_type(ftype, &role, &shape, &ctx);
                assert_eq!(
                    gguf_py_name(got),
                    t["type"].as_str().unwrap(),
                    "{label} {ftype_name} {name} {shape:?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "only {checked} tensors checked");
}

#[test]
fn estimate_is_llama_cpp_s_tensor_bytes() {
    for label in ["hf", "tiny"] {
        let exp = expected(label);
        let ctx = mix_context(label);
        for (ftype_name, per_ftype) in exp["ftypes"].as_object().unwrap() {
            let ftype = FileType::from_name(ftype_name).unwrap();
            let tensors: Vec<(TensorRole, Vec<usize>)> = per_ftype["tensors"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(name, t)| (TensorRole::from_gguf_name(name), shape_of(&t["dims"])))
                .collect();
            let want: u64 = per_ftype["tensors"]
                .as_object()
                .unwrap()
                .values()
                .map(|t| t["bytes"].as_u64().unwrap())
                .sum();
            assert_eq!(
                estimate_bytes(ftype, &tensors, &ctx),
                Some(want),
                "{label} {ftype_name}"
            );
        }
    }
}

/// Types whose quantiser is deterministic in one way only: ours must give llama.cpp's
/// bytes. (The K types search scales; they are held to llama.cpp's RMSE instead.)
fn byte_exact(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn dequantized(g: &Gguf, t: &llm_anatomy::gguf::GgufTensor) -> Vec<f32> {
    let mut out = vec![0.0f32; t.elements() as usize];
    llm_anatomy::quant::dequantize(t.ty, g.data(t), &mut out);
    out
}

fn quantize_to(label: &str, ftype: FileType, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{label}-{}.gguf", ftype.name()));
    to_gguf::quantize_checkpoint(&checkpoint_dir(label), &out, ftype, None, &mut |_, _, _| {})
        .unwrap_or_else(|e| panic!("{label} {}: {e}", ftype.name()));
    out
}

#[test]
fn quantized_files_match_llama_cpp_s() {
    let tmp = crate::common::scratch("quantize");
    for label in ["hf", "tiny"] {
        let exp = expected(label);
        let reference = Gguf::open(&quantize_to(label, FileType::F32, &tmp)).unwrap();
        for (ftype_name, per_ftype) in exp["ftypes"].as_object().unwrap() {
            let ftype = FileType::from_name(ftype_name).unwrap();
            let path = quantize_to(label, ftype, &tmp);
            let g = Gguf::open(&path).unwrap();
            let want = per_ftype["tensors"].as_object().unwrap();
            assert_eq!(g.tensors().len(), want.len(), "{label} {ftype_name}");
            assert_eq!(
                g.get("general.file_type").and_then(|v| v.as_u64()),
                Some(u64::from(ftype.id()))
            );
            assert_eq!(
                g.get("general.quantization_version")
                    .and_then(|v| v.as_u64()),
                Some(2)
            );
            for t in g.tensors() {
                let what = format!("{label} {ftype_name} {}", t.name);
                let w = want
                    .get(&t.name)
                    .unwrap_or_else(|| panic!("{what}: not in llama.cpp's file"));
                assert_eq!(gguf_py_name(t.ty), w["type"].as_str().unwrap(), "{what}");
                let dims: Vec<u64> = w["dims"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap())
                    .collect();
                assert_eq!(t.dims, dims, "{what}");
                let digest = sha256(g.data(t));
                if byte_exact(t.ty) {
                    assert_eq!(
                        digest,
                        w["sha256"].as_str().unwrap(),
                        "{what}: bytes differ"
                    );
                    continue;
                }
                let ours = dequantized(&g, t);
                let truth = dequantized(&reference, reference.tensor(&t.name).unwrap());
                let mse: f64 = ours
                    .iter()
                    .zip(&truth)
                    .map(|(a, b)| f64::from(a - b).powi(2))
                    .sum::<f64>()
                    / ours.len() as f64;
                let (rmse, theirs) = (mse.sqrt(), w["rmse"].as_f64().unwrap());
                assert!(
                    rmse <= theirs * 1.02,
                    "{what}: RMSE {rmse:e}, llama.cpp's {theirs:e}"
                );
            }
        }
    }
}

fn anatomy(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(args)
        .output()
        .unwrap()
}

/// A copy of the hf fixture whose `tensor` has weight 0 replaced by a bf16 NaN.
fn checkpoint_with_nan(dir: &Path, tensor: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let src = checkpoint_dir("hf");
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let mut bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let begin = header[tensor]["data_offsets"][0].as_u64().unwrap() as usize;
    let at = 8 + n + begin;
    bytes[at..at + 2].copy_from_slice(&0x7fc0u16.to_le_bytes());
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
}

#[test]
fn bad_input_is_named_and_leaves_the_output_alone() {
    let tmp = crate::common::scratch("quantize-bad");
    let out = tmp.join("out.gguf");
    let out_s = out.to_str().unwrap();
    let hf = checkpoint_dir("hf");
    let hf_s = hf.to_str().unwrap();

    let r = anatomy(&["quantize", hf_s, "--type", "q3_k_m", "--out", out_s]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("q3_k_m") && err.contains("q4_k_m"), "{err}");

    std::fs::write(&out, b"old").unwrap();
    let nan_dir = tmp.join("nan");
    let tensor = "model.layers.1.self_attn.q_proj.weight";
    checkpoint_with_nan(&nan_dir, tensor);
    let r = anatomy(&[
        "quantize",
        nan_dir.to_str().unwrap(),
        "--type",
        "q8_0",
        "--out",
        out_s,
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(
        err.contains(tensor) && err.contains("row 0, column 0"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        b"old",
        "a failed run replaced the output"
    );

    let r = anatomy(&[
        "quantize",
        hf_s,
        "--type",
        "q8_0",
        "--out",
        tmp.to_str().unwrap(),
    ]);
    assert_eq!(
        r.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );

    let r = anatomy(&[
        "quantize",
        tmp.join("absent").to_str().unwrap(),
        "--type",
        "q8_0",
        "--out",
        out_s,
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("absent"), "{err}");

    if Path::new("/dev/full").exists() {
        let r = anatomy(&["quantize", hf_s, "--type", "q8_0", "--out", "/dev/full"]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{err}");
        assert!(err.contains("/dev/full"), "{err}");
    }

    let r = anatomy(&["quantize", hf_s, "--type", "Q4_K_M", "--out", out_s]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let g = Gguf::open(&out).unwrap();
    assert_eq!(
        g.get("general.file_type").and_then(|v| v.as_u64()),
        Some(15)
    );
    assert_eq!(
        g.get("tokenizer.ggml.model").and_then(|v| v.as_str()),
        Some("none")
    );
}

/// transformers' fused expert layout (`mlp.experts.gate_up_proj` `[E, 2I, H]`, gate rows
/// first, and `mlp.experts.down_proj` `[E, H, I]`) gives the same GGUF as per-expert tensors.
#[test]
fn fused_experts_stack_as_per_expert_ones() {
    use safetensors::tensor::{Dtype, TensorView};
    let tmp = crate::common::scratch("quantize-fused");
    let fused_dir = tmp.join("fused");
    std::fs::create_dir_all(&fused_dir).unwrap();
    let src = checkpoint_dir("hf");
    std::fs::copy(src.join("config.json"), fused_dir.join("config.json")).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let cfg = config(&src);
    let experts = mix_context("hf").n_expert;
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in st.tensors() {
        if !name.contains(".mlp.experts.") {
            owned.push((name, view.shape().to_vec(), view.data().to_vec()));
        }
    }
    for l in 0..cfg["num_hidden_layers"].as_u64().unwrap() {
        let pre = format!("model.layers.{l}.mlp.experts");
        let get = |e: usize, p: &str| st.tensor(&format!("{pre}.{e}.{p}.weight")).unwrap();
        let (mut gate_up, mut down) = (Vec::new(), Vec::new());
        for e in 0..experts {
            gate_up.extend_from_slice(get(e, "gate_proj").data());
            gate_up.extend_from_slice(get(e, "up_proj").data());
            down.extend_from_slice(get(e, "down_proj").data());
        }
        let (i, h) = (
            get(0, "gate_proj").shape()[0],
            get(0, "gate_proj").shape()[1],
        );
        owned.push((
            format!("{pre}.gate_up_proj"),
            vec![experts, 2 * i, h],
            gate_up,
        ));
        owned.push((format!("{pre}.down_proj"), vec![experts, h, i], down));
    }
    let views: Vec<(String, TensorView<'_>)> = owned
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::BF16, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &fused_dir.join("model.safetensors")).unwrap();

    let a_path = tmp.join("per-expert.gguf");
    let b_path = tmp.join("fused.gguf");
    let none = &mut |_: u64, _: u64, _: &str| {};
    to_gguf::quantize_checkpoint(&src, &a_path, FileType::Q4_K_M, None, none).unwrap();
    to_gguf::quantize_checkpoint(&fused_dir, &b_path, FileType::Q4_K_M, None, none).unwrap();
    let (a, b) = (Gguf::open(&a_path).unwrap(), Gguf::open(&b_path).unwrap());
    assert_eq!(a.tensors().len(), b.tensors().len());
    for t in a.tensors() {
        let u = b.tensor(&t.name).unwrap();
        assert_eq!((&t.dims, t.ty), (&u.dims, u.ty), "{}", t.name);
        assert!(a.data(t) == b.data(u), "{}: bytes differ", t.name);
    }
}

/// The logits `anatomy logits` writes for ids 1..=8 of `model` (a directory or a .gguf).
fn engine_logits(model: &Path, out: &Path) -> Vec<f32> {
    let r = anatomy(&[
        "logits",
        model.to_str().unwrap(),
        "--ids",
        "1,2,3,4,5,6,7,8",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let bytes = std::fs::read(out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensor("logits")
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// Our own engine reads what `anatomy quantize` writes: the F32 file gives the checkpoint's
/// logits, the Q8_0 file logits close to them.
#[test]
fn the_engine_runs_the_quantised_files() {
    let tmp = crate::common::scratch("quantize-engine");
    let hf = checkpoint_dir("hf");
    let reference = engine_logits(&hf, &tmp.join("hf.safetensors"));
    for (ftype, tolerance) in [(FileType::F32, 1e-4), (FileType::Q8_0, 0.1)] {
        let gguf = quantize_to("hf", ftype, &tmp);
        let got = engine_logits(&gguf, &tmp.join("gguf.safetensors"));
        assert_eq!(got.len(), reference.len());
        let diff = got
            .iter()
            .zip(&reference)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff <= tolerance, "{}: max |Δlogit| {diff}", ftype.name());
    }
}
