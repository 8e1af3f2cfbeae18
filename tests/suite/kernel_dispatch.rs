//! The kernels' one policy (`kernels::policy`): every path this CPU has — AVX2 and AVX-512
//! f32 tiles, the int8 kernels with and without VNNI, the native bf16 modes — forced in
//! turn through `with_policy`, each matmul checked against the f64 dot of its dequantised
//! weights within the error its arithmetic allows. The paths that ran are printed
//! (`cargo test --test suite kernel_dispatch:: -- --nocapture`).

use llm_anatomy::kernels::policy::{Bf16Mode, Policy, QuantActs, Switches, cpu, with_policy};
use llm_anatomy::kernels::{Matrix, dispatch};
use llm_anatomy::quant::{GgmlType, dequantize, quantize};

const ROWS: usize = 40;
const COLS: usize = 256;
/// Decode, a small group (tiles) and a big one (row lanes, prefill tiles).
const TOKENS: [usize; 3] = [1, 3, 20];

/// Deterministic values in `[-scale, scale)`.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// A forced path: its name, the switches that ask for it, and the bound on `|x − x̃|` per
/// activation the path's input rounding allows (relative, or per 32-block step).
struct Path {
    name: &'static str,
    switches: Switches,
    input_error: InputError,
}

#[derive(Clone, Copy)]
enum InputError {
    /// The activations enter the product as f32.
    None,
    /// Quantised to 8 bits per block of 32: `|x − x̃| ≤ max|x_b| / 254`.
    Int8,
    /// Rounded to bf16: `|x − x̃| ≤ 2⁻⁹·|x|`.
    Bf16,
}

fn paths() -> Vec<Path> {
    let base = Switches::default();
    let f32_only = Switches {
        quant_activations: QuantActs::Off,
        ..base
    };
    let int8 = Switches {
        quant_activations: QuantActs::All,
        ..base
    };
    let path = |name, switches, input_error| Path {
        name,
        switches,
        input_error,
    };
    vec![
        path(
            "avx2 f32",
            Switches {
                no_avx512: true,
                ..f32_only
            },
            InputError::None,
        ),
        path(
            "avx2 int8",
            Switches {
                no_avx512: true,
                ..int8
            },
            InputError::Int8,
        ),
        path("avx512 f32", f32_only, InputError::None),
        path(
            "avx512 int8",
            Switches {
                no_vnni: true,
                ..int8
            },
            InputError::Int8,
        ),
        path("avx512 vnni int8", int8, InputError::Int8),
        path(
            "avx512 bf16 split",
            Switches {
                bf16_activations: Some(Bf16Mode::Split),
                ..f32_only
            },
            InputError::None,
        ),
        path(
            "avx512 bf16 round",
            Switches {
                bf16_activations: Some(Bf16Mode::Round),
                ..f32_only
            },
            InputError::Bf16,
        ),
    ]
}

/// Whether `policy` is what `asked` wanted (the CPU may lack a path: then it is skipped).
fn granted(policy: &Policy, asked: &Switches) -> bool {
    policy.avx512() != asked.no_avx512
        && (asked.quant_activations != QuantActs::All
            || policy.vnni() != (asked.no_vnni || asked.no_avx512))
        && policy.bf16() == asked.bf16_activations
}

/// The weights of `ty`, stored (the float types as typed slices, as the loaders hand
/// them to the kernels) and dequantised.
struct Weights {
    ty: GgmlType,
    bytes: Vec<u8>,
    bf16: Vec<half::bf16>,
    f16: Vec<half::f16>,
    wide: Vec<f32>,
}

impl Weights {
    fn new(ty: GgmlType, seed: u64) -> Weights {
        let w = values(ROWS * COLS, seed, 0.5);
        let mut bytes = Vec::new();
        quantize(ty, &w, &mut bytes);
        let mut wide = vec![0.0f32; ROWS * COLS];
        dequantize(ty, &bytes, &mut wide);
        let bf16 = wide.iter().map(|&v| half::bf16::from_f32(v)).collect();
        let f16 = wide.iter().map(|&v| half::f16::from_f32(v)).collect();
        Weights {
            ty,
            bytes,
            bf16,
            f16,
            wide,
        }
    }

    fn matrix(&self) -> Matrix<'_> {
        match self.ty {
            GgmlType::F32 => Matrix::f32(&self.wide, ROWS, COLS),
            GgmlType::Bf16 => Matrix::bf16(&self.bf16, ROWS, COLS),
            GgmlType::F16 => Matrix::f16(&self.f16, ROWS, COLS),
            ty => Matrix::quant(ty, &self.bytes, ROWS, COLS),
        }
    }
}

/// Checks `out` (`n × ROWS`) against the f64 products of `w` and `xs`.
fn check(name: &str, ty: GgmlType, w: &[f32], xs: &[f32], out: &[f32], err: InputError) {
    let eps = f64::from(f32::EPSILON);
    for (t, x) in xs.chunks_exact(COLS).enumerate() {
        for (r, row) in w.chunks_exact(COLS).enumerate() {
            let exact: f64 = row
                .iter()
                .zip(x)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let abs: f64 = row
                .iter()
                .zip(x)
                .map(|(&a, &b)| f64::from((a * b).abs()))
                .sum();
            let input: f64 = match err {
                InputError::None => 0.0,
                InputError::Bf16 => abs * 2f64.powi(-9),
                InputError::Int8 => row
                    .chunks_exact(32)
                    .zip(x.chunks_exact(32))
                    .map(|(wb, xb)| {
                        let step = xb.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
                        f64::from(step) / 2.0 * wb.iter().map(|v| f64::from(v.abs())).sum::<f64>()
                    })
                    .sum(),
            };
            // The f32 sums' rounding (and the int8 paths' f32 scaling, the same bound).
            let bound = input * (1.0 + 4.0 * eps) + 2.0 * COLS as f64 * eps * abs;
            let got = f64::from(out[t * ROWS + r]);
            assert!(
                (got - exact).abs() <= bound,
                "{name}, {}: token {t}, row {r}: {got} vs {exact}, bound {bound}",
                ty.name()
            );
        }
    }
}

#[test]
fn every_path_this_cpu_has_agrees_with_the_dequantised_product() {
    let types = [
        GgmlType::F32,
        GgmlType::Bf16,
        GgmlType::F16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];
    println!("cpu: {:?}", cpu());
    for ty in types {
        println!("{}: {}", ty.name(), dispatch::names(ty, cpu()).join(", "));
    }
    let mut ran = Vec::new();
    for path in paths() {
        let policy = Policy::new(cpu(), path.switches);
        if !granted(&policy, &path.switches) {
            println!("{}: not on this CPU, skipped", path.name);
            continue;
        }
        for (seed, ty) in (3..).zip(types) {
            let is_block = !matches!(ty, GgmlType::F32 | GgmlType::Bf16 | GgmlType::F16);
            let bf16_path = path.switches.bf16_activations.is_some();
            // The int8 paths run only for block formats, the bf16 modes only for bf16.
            if (matches!(path.input_error, InputError::Int8) && !is_block)
                || (bf16_path && ty != GgmlType::Bf16)
            {
                continue;
            }
            let w = Weights::new(ty, seed);
            for n in TOKENS {
                let xs = values(n * COLS, n as u64 + 11, 1.0);
                let mut out = vec![0.0f32; n * ROWS];
                with_policy(policy, || w.matrix().matmul(&xs, &mut out));
                check(path.name, ty, &w.wide, &xs, &out, path.input_error);
            }
            ran.push(format!("{} × {}", path.name, ty.name()));
        }
    }
    println!("paths run: {}", ran.join(", "));
    assert!(!ran.is_empty());
}

/// Forcing reaches the kernels: the int8 and f32 paths of a block format give different
/// sums, and the same policy gives the same bits twice.
#[test]
fn a_forced_policy_changes_the_path_and_is_deterministic() {
    let w = Weights::new(GgmlType::Q8_0, 1);
    let xs = values(3 * COLS, 5, 1.0);
    let run = |acts| {
        let p = Policy::new(
            cpu(),
            Switches {
                quant_activations: acts,
                ..Switches::default()
            },
        );
        let mut out = vec![0.0f32; 3 * ROWS];
        with_policy(p, || w.matrix().matmul(&xs, &mut out));
        out
    };
    let (int8, f32_path) = (run(QuantActs::All), run(QuantActs::Off));
    assert_ne!(int8, f32_path);
    assert_eq!(int8, run(QuantActs::All));
    assert_eq!(f32_path, run(QuantActs::Off));
}
