//! The kernels' one policy (`kernels::policy`): every path this CPU has — AVX2 and AVX-512
//! f32 tiles, the int8 kernels with and without VNNI, the native bf16 modes — forced in
//! turn through `with_policy`, each matmul checked against the f64 dot of its dequantised
//! weights within the error its arithmetic allows. The paths that ran are printed
//! (`cargo test --test suite kernel_dispatch:: -- --nocapture`).

use llm_anatomy::kernels::dispatch::{self, GroupedKernel};
use llm_anatomy::kernels::policy::{
    Bf16Mode, CpuFeatures, Policy, QuantActs, Switches, cpu, with_policy,
};
use llm_anatomy::kernels::{Group, Matrix, matmul_grouped};
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
            "portable",
            Switches {
                portable_matmul: true,
                ..base
            },
            InputError::None,
        ),
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
    (asked.portable_matmul || policy.avx512() != asked.no_avx512)
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

const TYPES: [GgmlType; 11] = [
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

/// Whether `path` applies to weights of type `ty`: the int8 paths only to block formats,
/// the bf16 modes only to bf16.
fn applies(path: &Path, ty: GgmlType) -> bool {
    let is_block = !matches!(ty, GgmlType::F32 | GgmlType::Bf16 | GgmlType::F16);
    let bf16_path = path.switches.bf16_activations.is_some();
    !((matches!(path.input_error, InputError::Int8) && !is_block)
        || (bf16_path && ty != GgmlType::Bf16))
}

#[test]
fn every_path_this_cpu_has_agrees_with_the_dequantised_product() {
    let types = TYPES;
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
            if !applies(&path, ty) {
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

/// The kernel family `dispatch::select` should name for `path` (on the types it applies
/// to) and groups of `tokens` rows (the bf16 split mode only while no group takes panels).
fn expected_kernel(path: &Path, tokens: &[usize]) -> &'static str {
    let sw = path.switches;
    if sw.portable_matmul {
        "Portable"
    } else if matches!(path.input_error, InputError::Int8) {
        "Int8"
    } else if sw.bf16_activations == Some(Bf16Mode::Round)
        || (sw.bf16_activations.is_some() && tokens.iter().all(|&n| n < 40))
    {
        "NativeBf16"
    } else {
        "F32Tiles"
    }
}

fn family(kernel: GroupedKernel) -> &'static str {
    match kernel {
        GroupedKernel::Portable => "Portable",
        GroupedKernel::F32Tiles => "F32Tiles",
        GroupedKernel::Int8 { .. } => "Int8",
        GroupedKernel::NativeBf16(_) => "NativeBf16",
    }
}

/// Each grouped path this CPU has, forced through the policy: `select` names the kernel
/// the path asks for, and a grouped matmul over three matrices (empty groups, decode,
/// small groups, groups that take the panels) equals, group by group, the f64 product of
/// its matrix's dequantised weights within the path's bound.
#[test]
fn every_grouped_path_agrees_with_the_dequantised_product() {
    let shapes: [&[usize]; 4] = [&[1], &[3, 0, 1], &[20, 2], &[0, 5, 17, 45, 1]];
    let mut ran = Vec::new();
    for path in paths() {
        let policy = Policy::new(cpu(), path.switches);
        if !granted(&policy, &path.switches) {
            continue;
        }
        for (seed, ty) in (40..).zip(TYPES) {
            if !applies(&path, ty) {
                continue;
            }
            let ws: Vec<Weights> = (0..3).map(|k| Weights::new(ty, seed * 3 + k)).collect();
            for shape in shapes {
                let plan =
                    dispatch::select(ty, &policy, policy.avx512(), COLS, shape.iter().copied());
                assert_eq!(
                    family(plan.kernel),
                    expected_kernel(&path, shape),
                    "{}, {}, groups {shape:?}: {plan:?}",
                    path.name,
                    ty.name()
                );
                let mut groups = Vec::new();
                let mut first = 0;
                for (k, &n) in shape.iter().enumerate() {
                    groups.push(Group {
                        matrix: k % 3,
                        first_in: first,
                        n,
                        first_out: first,
                    });
                    first += n;
                }
                let xs = values(first * COLS, first as u64 + 7, 1.0);
                let mut out = vec![0.0f32; first * ROWS];
                with_policy(policy, || {
                    matmul_grouped(|m| ws[m].matrix(), &groups, &xs, &mut out)
                });
                for g in &groups {
                    let x = &xs[g.first_in * COLS..(g.first_in + g.n) * COLS];
                    let o = &out[g.first_out * ROWS..(g.first_out + g.n) * ROWS];
                    check(path.name, ty, &ws[g.matrix].wide, x, o, path.input_error);
                }
            }
            ran.push(format!("{} × {}", path.name, ty.name()));
        }
    }
    println!("grouped paths run: {}", ran.join(", "));
    assert!(ran.iter().any(|r| r.starts_with("portable")));
}

/// The dispatch table as `select` reads it, for the instruction sets a CPU may have (the
/// default switches; `ANATOMY_BF16_ACTIVATIONS` adds the native bf16 kernels), printed as
/// a markdown table: `cargo test --test suite kernel_dispatch::the_table -- --nocapture`.
#[test]
fn the_table_names_a_kernel_for_every_type_and_isa() {
    let avx2 = CpuFeatures {
        avx2: true,
        fma: true,
        f16c: true,
        ..CpuFeatures::default()
    };
    let avx512 = CpuFeatures {
        avx512f: true,
        avx512bw: true,
        avx512vl: true,
        ..avx2
    };
    let vnni = CpuFeatures {
        avx512vnni: true,
        avx512bf16: true,
        ..avx512
    };
    let isas = [
        ("no SIMD", CpuFeatures::default()),
        ("AVX2", avx2),
        ("AVX-512", avx512),
        ("AVX-512 VNNI+BF16", vnni),
    ];
    let name = |cpu: CpuFeatures, ty: GgmlType, n: usize| {
        let policy = Policy::new(cpu, Switches::default());
        let plan = dispatch::select_on(cpu, ty, &policy, policy.avx512(), COLS, [n].into_iter());
        let kernel = match plan.kernel {
            GroupedKernel::Int8 { tiles, vnni, .. } => {
                let vnni = vnni
                    && dispatch::kernels(ty)
                        .vnni_from_tokens
                        .is_some_and(|m| n >= m);
                let decode = dispatch::kernels(ty).avx2_decode_rows && cpu.avx2_fma();
                match (vnni, tiles, n) {
                    (true, _, _) => "int8 vnni",
                    (false, _, 1) if decode => "int8 avx2 decode rows",
                    (false, true, _) => "int8 avx2 tiles",
                    (false, false, _) if cpu.avx2 => "int8 avx2 row dot",
                    (false, false, _) => "int8 reference dot",
                }
            }
            GroupedKernel::NativeBf16(_) => "bf16 native",
            GroupedKernel::Portable => "portable f32 dot",
            GroupedKernel::F32Tiles if n >= plan.panel_min_tokens => "f32 outer-product panels",
            GroupedKernel::F32Tiles if plan.avx512 => "f32 avx512 tiles",
            GroupedKernel::F32Tiles if cpu.avx2_fma() => "f32 avx2 tiles",
            GroupedKernel::F32Tiles => "portable f32 dot",
        };
        assert!(!kernel.is_empty());
        kernel
    };
    println!("| type | ISA | decode (1 token) | group of 8 | group of 64 |");
    println!("|---|---|---|---|---|");
    for ty in TYPES {
        for (isa, cpu) in isas {
            println!(
                "| {} | {isa} | {} | {} | {} |",
                ty.name(),
                name(cpu, ty, 1),
                name(cpu, ty, 8),
                name(cpu, ty, 64)
            );
        }
    }
}
