//! Which kernels run: the CPU's features, detected once into [`CpuFeatures`], and the
//! `ANATOMY_*` switches, read once into [`Switches`], make one [`Policy`]. Every kernel
//! choice reads [`current`]; a test forces another policy for the code it runs with
//! [`with_policy`] (the only override), and [`Policy::new`] never lets a forced policy ask
//! for a path the CPU lacks.
//!
//! The switches, each `1` (on) or `0` (off) unless named values are listed; any other value
//! is named on stderr once and ignored:
//! - `ANATOMY_NO_AVX512`: the AVX-512 tiles off, and with them VNNI and AVX512_BF16;
//! - `ANATOMY_NO_VNNI`: the VNNI int8 kernels off; `ANATOMY_NO_BF16`: the bf16 kernels off;
//! - `ANATOMY_BF16_ACTIVATIONS=round|split`: the native bf16 path and its activations;
//! - `ANATOMY_QUANT_ACTIVATIONS=1|0` (also `on|off`): the int8 path of the block formats;
//!   `all`: int8 at every group size (to measure it against the f32 tiles on large groups);
//! - `ANATOMY_PROBE_PORTABLE`: the bandwidth probe's portable loop;
//! - `ANATOMY_PORTABLE_MATMUL`: the matmuls' portable widened dot, no SIMD and no int8,
//!   and the plain loops of the prefill attention blocks.

use std::cell::Cell;
use std::sync::OnceLock;

/// The instruction-set features the kernels are compiled with, as this CPU reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vl: bool,
    pub avx512vnni: bool,
    pub avx512bf16: bool,
}

impl CpuFeatures {
    /// Asks the CPU (once per process through [`cpu`]).
    pub fn detect() -> CpuFeatures {
        #[cfg(target_arch = "x86_64")]
        {
            CpuFeatures {
                avx2: is_x86_feature_detected!("avx2"),
                fma: is_x86_feature_detected!("fma"),
                f16c: is_x86_feature_detected!("f16c"),
                avx512f: is_x86_feature_detected!("avx512f"),
                avx512bw: is_x86_feature_detected!("avx512bw"),
                avx512vl: is_x86_feature_detected!("avx512vl"),
                avx512vnni: is_x86_feature_detected!("avx512vnni"),
                avx512bf16: is_x86_feature_detected!("avx512bf16"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            CpuFeatures::default()
        }
    }

    /// AVX2 with FMA and F16C: what the 256-bit tiles and int8 kernels need.
    pub fn avx2_fma(&self) -> bool {
        self.avx2 && self.fma && self.f16c
    }

    /// What the VNNI int8 kernels are compiled with.
    pub fn vnni(&self) -> bool {
        self.avx2_fma() && self.avx512f && self.avx512bw && self.avx512vl && self.avx512vnni
    }

    /// What the native bf16 kernels are compiled with.
    pub fn bf16(&self) -> bool {
        self.avx512f && self.avx512bw && self.avx512bf16
    }
}

/// This CPU's features, detected on first use.
pub fn cpu() -> CpuFeatures {
    static CPU: OnceLock<CpuFeatures> = OnceLock::new();
    *CPU.get_or_init(CpuFeatures::detect)
}

/// How the activations meet bf16 weights on the native bf16 path (the `bf16` module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Mode {
    /// Each activation as three bf16 pieces: within f32 rounding of the widening kernels.
    Split,
    /// Each activation rounded to bf16, as llama.cpp's and transformers' bf16 compute.
    Round,
}

/// How the block formats meet their activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantActs {
    /// Weights dequantised to f32 for every group.
    Off,
    /// Int8 for the groups small enough to win (`quant::int8_max_tokens`).
    Auto,
    /// Int8 for every group, whatever its size (tests of the int8 kernels).
    All,
}

/// What the environment asks for, before the CPU has its say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switches {
    pub no_avx512: bool,
    pub no_vnni: bool,
    pub no_bf16: bool,
    pub bf16_activations: Option<Bf16Mode>,
    pub quant_activations: QuantActs,
    pub probe_portable: bool,
    pub portable_matmul: bool,
}

impl Default for Switches {
    /// No switch set: every path the CPU has, bf16 weights widened, int8 where it wins.
    fn default() -> Switches {
        Switches {
            no_avx512: false,
            no_vnni: false,
            no_bf16: false,
            bf16_activations: None,
            quant_activations: QuantActs::Auto,
            probe_portable: false,
            portable_matmul: false,
        }
    }
}

/// Parses the switches from `var` (the environment, or a test's table); each value that
/// is not understood is returned as a message naming the variable and the value.
pub fn parse_switches(var: impl Fn(&str) -> Option<String>) -> (Switches, Vec<String>) {
    let mut s = Switches::default();
    let mut ignored = Vec::new();
    let mut flag = |name: &str, slot: &mut bool| match var(name).as_deref().map(str::trim) {
        None => {}
        Some("1") => *slot = true,
        Some("0") => *slot = false,
        Some(other) => ignored.push(format!("{name}={other:?} is neither 1 nor 0: ignored")),
    };
    flag("ANATOMY_NO_AVX512", &mut s.no_avx512);
    flag("ANATOMY_NO_VNNI", &mut s.no_vnni);
    flag("ANATOMY_NO_BF16", &mut s.no_bf16);
    flag("ANATOMY_PROBE_PORTABLE", &mut s.probe_portable);
    flag("ANATOMY_PORTABLE_MATMUL", &mut s.portable_matmul);
    match var("ANATOMY_BF16_ACTIVATIONS").as_deref().map(str::trim) {
        None => {}
        Some("round") => s.bf16_activations = Some(Bf16Mode::Round),
        Some("split") => s.bf16_activations = Some(Bf16Mode::Split),
        Some(other) => ignored.push(format!(
            "ANATOMY_BF16_ACTIVATIONS={other:?} is neither \"round\" nor \"split\": ignored, \
             bf16 weights are widened to f32"
        )),
    }
    match var("ANATOMY_QUANT_ACTIVATIONS").as_deref().map(str::trim) {
        None => {}
        Some("1" | "on") => s.quant_activations = QuantActs::Auto,
        Some("0" | "off") => s.quant_activations = QuantActs::Off,
        Some("all") => s.quant_activations = QuantActs::All,
        Some(other) => ignored.push(format!(
            "ANATOMY_QUANT_ACTIVATIONS={other:?} is none of 1, 0, on, off, all: ignored"
        )),
    }
    (s, ignored)
}

/// The switches of this process's environment, read once; what is ignored is said once.
pub fn env_switches() -> Switches {
    static ENV: OnceLock<Switches> = OnceLock::new();
    *ENV.get_or_init(|| {
        let (s, ignored) = parse_switches(|k| std::env::var(k).ok());
        for line in ignored {
            eprintln!("{line}");
        }
        s
    })
}

/// The kernel paths the matmuls take. Built only through [`Policy::new`], so each path
/// it names is one the CPU has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    avx512: bool,
    vnni: bool,
    bf16: Option<Bf16Mode>,
    quant: QuantActs,
    probe_portable: bool,
    portable_matmul: bool,
}

impl Policy {
    /// The paths `switches` allow among those `cpu` has.
    pub fn new(cpu: CpuFeatures, switches: Switches) -> Policy {
        let avx512 = cpu.avx512f && !switches.no_avx512;
        Policy {
            avx512,
            vnni: avx512 && cpu.vnni() && !switches.no_vnni,
            bf16: switches
                .bf16_activations
                .filter(|_| avx512 && cpu.bf16() && !switches.no_bf16),
            quant: switches.quant_activations,
            probe_portable: switches.probe_portable,
            portable_matmul: switches.portable_matmul,
        }
    }

    /// Whether the f32 tiles, attention and probes take AVX-512.
    pub fn avx512(&self) -> bool {
        self.avx512
    }

    /// Whether the int8 groups take the VNNI kernels where they win.
    pub fn vnni(&self) -> bool {
        self.vnni
    }

    /// The native bf16 mode, `None` for the widening kernels.
    pub fn bf16(&self) -> Option<Bf16Mode> {
        self.bf16
    }

    /// Whether and where the block formats quantise their activations.
    pub fn quant_activations(&self) -> QuantActs {
        self.quant
    }

    /// Whether the bandwidth probe runs its portable loop.
    pub fn probe_portable(&self) -> bool {
        self.probe_portable
    }

    /// Whether the grouped matmuls take the portable widened dot (the scalar reference).
    pub fn portable_matmul(&self) -> bool {
        self.portable_matmul
    }
}

thread_local! {
    static FORCED: Cell<Option<Policy>> = const { Cell::new(None) };
}

/// The policy of this process: this CPU and its environment.
pub fn from_env() -> Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    *POLICY.get_or_init(|| Policy::new(cpu(), env_switches()))
}

/// The policy the calling thread's matmuls take: the one [`with_policy`] forced, else
/// [`from_env`]. Matmuls decide on the calling thread, before their row tasks.
pub fn current() -> Policy {
    FORCED.with(Cell::get).unwrap_or_else(from_env)
}

/// Runs `f` with `policy` for the matmuls this thread calls.
pub fn with_policy<R>(policy: Policy, f: impl FnOnce() -> R) -> R {
    let before = FORCED.with(|o| o.replace(Some(policy)));
    let r = f();
    FORCED.with(|o| o.set(before));
    r
}

/// Runs `f` with [`current`]'s switches changed by `change` (on this CPU).
pub fn with_switches<R>(change: impl FnOnce(&mut Switches), f: impl FnOnce() -> R) -> R {
    let mut s = switches_of(current());
    change(&mut s);
    with_policy(Policy::new(cpu(), s), f)
}

/// The switches that rebuild `p` on this CPU.
fn switches_of(p: Policy) -> Switches {
    Switches {
        no_avx512: !p.avx512,
        no_vnni: !p.vnni,
        no_bf16: p.bf16.is_none(),
        bf16_activations: p.bf16,
        quant_activations: p.quant,
        probe_portable: p.probe_portable,
        portable_matmul: p.portable_matmul,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> (Switches, Vec<String>) {
        parse_switches(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn zero_turns_a_switch_off_and_unknown_values_are_named() {
        let (s, ignored) = parse(&[("ANATOMY_NO_AVX512", "0"), ("ANATOMY_NO_VNNI", "yes")]);
        assert!(!s.no_avx512 && !s.no_vnni);
        assert_eq!(ignored.len(), 1);
        assert!(ignored[0].contains("ANATOMY_NO_VNNI") && ignored[0].contains("yes"));
        let (s, ignored) = parse(&[("ANATOMY_QUANT_ACTIVATIONS", "off")]);
        assert_eq!((s.quant_activations, ignored.len()), (QuantActs::Off, 0));
        let (s, ignored) = parse(&[("ANATOMY_QUANT_ACTIVATIONS", "all")]);
        assert_eq!((s.quant_activations, ignored.len()), (QuantActs::All, 0));
        let (s, ignored) = parse(&[("ANATOMY_QUANT_ACTIVATIONS", "none")]);
        assert_eq!((s.quant_activations, ignored.len()), (QuantActs::Auto, 1));
        let (s, _) = parse(&[("ANATOMY_BF16_ACTIVATIONS", "round")]);
        assert_eq!(s.bf16_activations, Some(Bf16Mode::Round));
    }

    #[test]
    fn no_avx512_turns_off_vnni_and_bf16_and_the_cpu_has_the_last_word() {
        let all = CpuFeatures {
            avx2: true,
            fma: true,
            f16c: true,
            avx512f: true,
            avx512bw: true,
            avx512vl: true,
            avx512vnni: true,
            avx512bf16: true,
        };
        let asked = Switches {
            bf16_activations: Some(Bf16Mode::Split),
            ..Switches::default()
        };
        let p = Policy::new(all, asked);
        assert!(p.avx512() && p.vnni() && p.bf16() == Some(Bf16Mode::Split));
        let off = Policy::new(
            all,
            Switches {
                no_avx512: true,
                ..asked
            },
        );
        assert!(!off.avx512() && !off.vnni() && off.bf16().is_none());
        let none = Policy::new(CpuFeatures::default(), asked);
        assert!(!none.avx512() && !none.vnni() && none.bf16().is_none());
    }
}
