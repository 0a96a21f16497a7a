//! Instruction-set selection, done once at run time (never by `target-cpu=native`).
//! `KINEMA_CPU_ISA=scalar|avx2|avx512|neon` forces one path for drift studies and tests.

use crate::error::{Error, Result};

/// A CPU kernel family. `Scalar` is the clear reference implementation every fast path is
/// tested against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/DQ/VL (+ F16C); bf16 dot products when `avx512_bf16` is present.
    Avx512,
    /// aarch64 Advanced SIMD.
    Neon,
}

impl Isa {
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    pub fn parse(s: &str) -> Result<Isa> {
        Isa::ALL
            .into_iter()
            .find(|i| i.name() == s.trim())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown CPU ISA {s:?}: expected scalar, avx2, avx512 or neon"
                ))
            })
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every path this CPU can run, the reference first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
    }

    /// The fastest supported path, unless `KINEMA_CPU_ISA` forces one.
    pub fn select() -> Result<Isa> {
        if let Ok(v) = std::env::var("KINEMA_CPU_ISA") {
            let isa = Isa::parse(&v)?;
            if !isa.is_supported() {
                return Err(Error::InvalidArgument(format!(
                    "KINEMA_CPU_ISA={} but this CPU cannot run it (available: {})",
                    isa.name(),
                    Isa::available()
                        .iter()
                        .map(|i| i.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            return Ok(isa);
        }
        Ok(Isa::best())
    }

    /// The fastest supported path.
    pub fn best() -> Isa {
        [Isa::Avx512, Isa::Avx2, Isa::Neon]
            .into_iter()
            .find(|i| i.is_supported())
            .unwrap_or(Isa::Scalar)
    }
}

/// Whether the CPU has AVX-512 BF16 dot products (`vdpbf16ps`).
pub fn has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        Isa::Avx512.is_supported() && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The CPU feature flags relevant to kinema, for `kinema info`.
pub fn feature_report() -> Vec<(&'static str, bool)> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as d;
        vec![
            ("avx2", d!("avx2")),
            ("fma", d!("fma")),
            ("f16c", d!("f16c")),
            ("avx512f", d!("avx512f")),
            ("avx512bw", d!("avx512bw")),
            ("avx512vl", d!("avx512vl")),
            ("avx512bf16", d!("avx512bf16")),
            ("avx512vnni", d!("avx512vnni")),
        ]
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as d;
        vec![
            ("neon", d!("neon")),
            ("fp16", d!("fp16")),
            ("bf16", d!("bf16")),
            ("dotprod", d!("dotprod")),
        ]
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names_and_reference_is_always_there() {
        for i in Isa::ALL {
            assert_eq!(Isa::parse(i.name()).unwrap(), i);
        }
        assert!(Isa::parse("sse9").is_err());
        assert!(Isa::available().contains(&Isa::Scalar));
        assert!(Isa::best().is_supported());
    }
}
