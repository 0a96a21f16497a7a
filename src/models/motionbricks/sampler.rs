//! Pose-token sampling, as upstream `motion_inference._predict_pose_tokens` picks tokens
//! (`motionbricks/motionbricks/motion_backbone/inference/motion_inference.py#L306-309`):
//! argmax of the logits, or `gumbel_sample`
//! (`motionbricks/motionbricks/motion_backbone/models/sampling.py#L4-14`):
//! `token = first argmax(logit + g(u))`, `g(u) = -log_safe(-log_safe(u))`,
//! `log_safe(x) = ln(max(x, 1e-20))`, both clamps and the edges at u = 0 and u = 1 kept.
//!
//! Upstream draws one uniform per logit of the full padded `[16, 8, 10]` tensor in memory
//! order (position, head, code), padded positions included (`../shared/docs/upstream/
//! motionbricks.md` section 3.1). Here each plan owns a private SplitMix64 stream started at
//! its seed ([`crate::rng`]): uniform `i` is the high 24 bits of output `i` times 2^-24,
//! exactly representable in f32. The uniforms are drawn on the host and handed to the graph,
//! so the CPU and Vulkan backends consume identical draws; there is no global generator.

use std::fmt;
use std::str::FromStr;

use crate::rng;
use crate::sampling::argmax_row;
use crate::sampling::gumbel_noise;
use crate::{Error, Result};

/// How pose tokens are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Sampling {
    /// `logits.argmax(-1)`: what the shipped demo agent asks for
    /// (`motion_backbone/demo/full_agent.py#L468-469`).
    Argmax,
    /// `gumbel_sample(logits, temperature = 1.0)`: `predict()`'s default
    /// (`config.get('pose_token_sampling_use_argmax', False)`).
    #[default]
    Gumbel,
}

impl Sampling {
    /// The flag value (`argmax` or `gumbel`).
    pub fn name(self) -> &'static str {
        match self {
            Sampling::Argmax => "argmax",
            Sampling::Gumbel => "gumbel",
        }
    }
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Sampling {
    type Err = Error;
    fn from_str(s: &str) -> Result<Sampling> {
        match s {
            "argmax" => Ok(Sampling::Argmax),
            "gumbel" => Ok(Sampling::Gumbel),
            other => Err(Error::InvalidArgument(format!(
                "sampling {other:?}: expected \"argmax\" or \"gumbel\""
            ))),
        }
    }
}

/// A plan's seed from its text form: a decimal integer in `0..2^64`.
pub fn parse_seed(s: &str) -> Result<u64> {
    s.trim().parse::<u64>().map_err(|_| {
        Error::InvalidArgument(format!(
            "seed {s:?}: expected a whole number from 0 to {}",
            u64::MAX
        ))
    })
}

/// The `n` uniforms one plan consumes, from its private stream at `seed`: uniform `i` is
/// [`rng::uniform`]`(seed, i)`, in upstream's memory order over the padded logits.
pub fn plan_uniforms(seed: u64, n: usize) -> Vec<f32> {
    (0..n as u64).map(|i| rng::uniform(seed, i)).collect()
}

/// Tokens of `logits` (rows of `codes` values) on the host, the reference the graph's
/// sampling is tested against. Gumbel needs one uniform per logit, each in [0, 1].
pub fn sample_tokens(
    logits: &[f32],
    codes: usize,
    sampling: Sampling,
    uniforms: Option<&[f32]>,
) -> Result<Vec<u32>> {
    if codes == 0 || !logits.len().is_multiple_of(codes) {
        return Err(Error::Shape(format!(
            "{} logits are not whole rows of {codes} codes",
            logits.len()
        )));
    }
    let u = match (sampling, uniforms) {
        (Sampling::Argmax, _) => None,
        (Sampling::Gumbel, Some(u)) => {
            check_uniforms(u, logits.len())?;
            Some(u)
        }
        (Sampling::Gumbel, None) => {
            return Err(Error::InvalidArgument(
                "Gumbel sampling needs one uniform per logit".into(),
            ));
        }
    };
    let mut row = vec![0f32; codes];
    Ok(logits
        .chunks_exact(codes)
        .enumerate()
        .map(|(r, l)| {
            for (c, v) in row.iter_mut().enumerate() {
                // `x / max(T, 1e-10)` with T = 1 is exact; the score is `logit + g(u)`.
                *v = match u {
                    Some(u) => l[c] + gumbel_noise(u[r * codes + c]),
                    None => l[c],
                };
            }
            // torch.argmax: the first maximum wins; a NaN is the maximum.
            argmax_row(&row)
        })
        .collect())
}

/// Uniforms given from outside (a `--uniforms` file): `n` of them, each in [0, 1].
pub fn check_uniforms(u: &[f32], n: usize) -> Result<()> {
    if u.len() != n {
        return Err(Error::Shape(format!(
            "{} uniforms given, {n} needed (one per pose logit)",
            u.len()
        )));
    }
    if let Some(i) = u.iter().position(|x| !(0.0..=1.0).contains(x)) {
        return Err(Error::InvalidArgument(format!(
            "uniform {i} is {}, outside [0, 1]",
            u[i]
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags() {
        assert_eq!("argmax".parse::<Sampling>().unwrap(), Sampling::Argmax);
        assert_eq!("gumbel".parse::<Sampling>().unwrap(), Sampling::Gumbel);
        assert!("Gumbel".parse::<Sampling>().is_err());
        assert!("top-k".parse::<Sampling>().is_err());
        assert_eq!(parse_seed("18446744073709551615").unwrap(), u64::MAX);
        for bad in ["-1", "1.5", "", "0x10", "18446744073709551616", "seven"] {
            assert!(parse_seed(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn uniforms_are_the_plan_stream() {
        let u = plan_uniforms(7, 1280);
        for (i, &x) in u.iter().enumerate() {
            assert_eq!(x, rng::uniform(7, i as u64));
            assert!((0.0..1.0).contains(&x));
            assert_eq!(x * 16_777_216.0, (x * 16_777_216.0).trunc());
        }
        assert_ne!(plan_uniforms(8, 4), u[..4]);
    }

    #[test]
    fn first_maximum_and_bad_input() {
        let l = [1.0, 3.0, 3.0, 0.0];
        assert_eq!(sample_tokens(&l, 4, Sampling::Argmax, None).unwrap(), [1]);
        let u = [0.5f32; 4];
        assert_eq!(
            sample_tokens(&l, 4, Sampling::Gumbel, Some(&u)).unwrap(),
            [1]
        );
        assert!(sample_tokens(&l, 3, Sampling::Argmax, None).is_err());
        assert!(sample_tokens(&l, 4, Sampling::Gumbel, None).is_err());
        assert!(sample_tokens(&l, 4, Sampling::Gumbel, Some(&u[..3])).is_err());
        assert!(sample_tokens(&l, 4, Sampling::Gumbel, Some(&[0.5, 1.5, 0.0, 0.0])).is_err());
        assert!(sample_tokens(&l, 4, Sampling::Gumbel, Some(&[0.5, f32::NAN, 0.0, 0.0])).is_err());
    }
}
