//! The arithmetic contract of a run ([`Precision`]) and the `--precision` choice that each
//! backend resolves when it is created ([`PrecisionChoice`]). Below both backends and the
//! trait, so every layer can name a mode.

use crate::error::{Error, Result};

/// Arithmetic contract of a run. Every result records which mode produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 arithmetic everywhere (f16/bf16/q8_0 weights are widened to f32 exactly before
    /// use): for parity and drift studies.
    Strict,
    /// Reduced-precision arithmetic where it is faster: bf16 dot products on CPUs with
    /// `avx512_bf16`, f16/bf16 cooperative-matrix GEMM on GPUs. Accumulation stays f32.
    Fast,
}

impl Precision {
    /// `strict` or `fast`, as `--precision` spells it and results record it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Strict => "strict",
            Precision::Fast => "fast",
        }
    }
    /// The mode named `strict` or `fast`.
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "strict" => Ok(Precision::Strict),
            "fast" => Ok(Precision::Fast),
            _ => Err(Error::InvalidArgument(format!(
                "unknown precision {s:?}: expected strict or fast"
            ))),
        }
    }
}

/// The `--precision` choice: a mode, or `auto`, which each backend resolves when created: the
/// CPU to [`Precision::Strict`], Vulkan to [`Precision::Fast`] on a device with cooperative
/// matrices and to strict otherwise. A backend's `BackendInfo::precision`
/// is always the resolved mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrecisionChoice {
    /// Always [`Precision::Strict`].
    Strict,
    /// Always [`Precision::Fast`].
    Fast,
    /// Fast where the backend runs it profitably, else strict.
    Auto,
}

impl PrecisionChoice {
    /// `strict`, `fast` or `auto`.
    pub fn parse(s: &str) -> Result<PrecisionChoice> {
        match s {
            "auto" => Ok(PrecisionChoice::Auto),
            _ => Precision::parse(s).map(PrecisionChoice::from).map_err(|_| {
                Error::InvalidArgument(format!(
                    "unknown precision {s:?}: expected strict, fast or auto"
                ))
            }),
        }
    }
    /// The mode on a backend that runs fast mode profitably (`fast_available`), else strict
    /// for `Auto`; an explicit mode is kept.
    pub fn resolve(self, fast_available: bool) -> Precision {
        match self {
            PrecisionChoice::Strict => Precision::Strict,
            PrecisionChoice::Fast => Precision::Fast,
            PrecisionChoice::Auto if fast_available => Precision::Fast,
            PrecisionChoice::Auto => Precision::Strict,
        }
    }
}

impl From<Precision> for PrecisionChoice {
    fn from(p: Precision) -> PrecisionChoice {
        match p {
            Precision::Strict => PrecisionChoice::Strict,
            Precision::Fast => PrecisionChoice::Fast,
        }
    }
}
