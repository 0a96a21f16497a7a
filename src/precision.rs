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
    /// Strict everywhere except the large linear layers and the attention, which run on the
    /// GPU's matrix cores with each f32 operand split into an f16 high part (its mantissa cut
    /// to 10 bits) and an f16 low part (the rest, scaled by 2^11): three f16 products summed
    /// in f32 per k step, so each term is within about 2^-19 of the f32 product (strict's
    /// GEMM rounds each to 2^-24); the softmax is strict's. Measured error: 2-5x strict's, 50-200x below fast mode's. Only operands in
    /// f16's normal range (6.1e-5 to 65504 in magnitude) keep that accuracy: smaller ones
    /// lose relative accuracy (absolute error below 2^-25 |w| a term), larger ones overflow.
    /// Vulkan devices with `VK_NV_cooperative_matrix2` only; elsewhere it resolves to
    /// [`Precision::Strict`].
    Split,
}

impl Precision {
    /// `strict`, `fast` or `split`, as `--precision` spells it and results record it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Strict => "strict",
            Precision::Fast => "fast",
            Precision::Split => "split",
        }
    }
    /// The mode named `strict`, `fast` or `split`.
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "strict" => Ok(Precision::Strict),
            "fast" => Ok(Precision::Fast),
            "split" => Ok(Precision::Split),
            _ => Err(Error::InvalidArgument(format!(
                "unknown precision {s:?}: expected strict, fast or split"
            ))),
        }
    }
}

/// The `--precision` choice: a mode, or `auto`, which each backend resolves when created: the
/// CPU to [`Precision::Strict`], Vulkan to [`Precision::Fast`] on a device with cooperative
/// matrices and to strict otherwise. [`PrecisionChoice::Split`] resolves to split only where
/// the backend runs it (Vulkan with `VK_NV_cooperative_matrix2`), else to strict, the more
/// exact mode. A backend's `BackendInfo::precision` is always the resolved mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrecisionChoice {
    /// Always [`Precision::Strict`].
    Strict,
    /// Always [`Precision::Fast`].
    Fast,
    /// [`Precision::Split`] where the backend has it, else [`Precision::Strict`].
    Split,
    /// Fast where the backend runs it profitably, else strict.
    Auto,
}

impl PrecisionChoice {
    /// `strict`, `fast`, `split` or `auto`.
    pub fn parse(s: &str) -> Result<PrecisionChoice> {
        match s {
            "auto" => Ok(PrecisionChoice::Auto),
            _ => Precision::parse(s).map(PrecisionChoice::from).map_err(|_| {
                Error::InvalidArgument(format!(
                    "unknown precision {s:?}: expected strict, fast, split or auto"
                ))
            }),
        }
    }
    /// The mode on a backend that runs fast mode profitably (`fast_available`) and split
    /// precision at all (`split_available`): `Auto` is fast or strict, `Split` split or strict;
    /// strict and fast are kept.
    pub fn resolve(self, fast_available: bool, split_available: bool) -> Precision {
        match self {
            PrecisionChoice::Strict => Precision::Strict,
            PrecisionChoice::Fast => Precision::Fast,
            PrecisionChoice::Split if split_available => Precision::Split,
            PrecisionChoice::Split => Precision::Strict,
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
            Precision::Split => PrecisionChoice::Split,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for p in [Precision::Strict, Precision::Fast, Precision::Split] {
            assert_eq!(Precision::parse(p.name()).unwrap(), p);
            assert_eq!(PrecisionChoice::parse(p.name()).unwrap(), p.into());
        }
        assert_eq!(
            PrecisionChoice::parse("auto").unwrap(),
            PrecisionChoice::Auto
        );
        let e = PrecisionChoice::parse("tf32").unwrap_err().to_string();
        assert!(e.contains("\"tf32\"") && e.contains("split"), "{e}");
        assert!(Precision::parse("auto").is_err());
    }

    #[test]
    fn split_resolves_to_strict_where_the_backend_lacks_it() {
        use PrecisionChoice as C;
        for fast in [false, true] {
            assert_eq!(C::Split.resolve(fast, true), Precision::Split);
            assert_eq!(C::Split.resolve(fast, false), Precision::Strict);
            assert_eq!(C::Strict.resolve(fast, true), Precision::Strict);
            assert_eq!(C::Fast.resolve(fast, false), Precision::Fast);
        }
        assert_eq!(C::Auto.resolve(true, true), Precision::Fast);
        assert_eq!(C::Auto.resolve(false, true), Precision::Strict);
    }
}
