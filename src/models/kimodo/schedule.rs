//! Kimodo's diffusion schedule (`kimodo/model/diffusion.py`), with upstream's arithmetic:
//! the cosine betas in f64 cast to f32, the base cumulative product, the respacing of the
//! timesteps in f32 with round-half-even, and the telescoped f32 betas, alphas and cumulative
//! product of the respaced schedule (`calc_diffusion_vars`, #L60-94).
//!
//! Cumulative products are those of PyTorch on the CPU, where the reference fixtures are
//! captured: `torch.cumprod` of f32 accumulates in double (ATen's `cpu_cum_base_kernel` uses
//! `acc_type<float, /*is_cuda=*/false>`, which is `double`) and rounds each output to f32. A
//! plain f32 running product differs from it by an ulp here and there (checked against
//! PyTorch 2.x: the double form matches every value bit for bit, the f32 form does not).

use crate::{Error, Result};

/// The respaced schedule of `steps` DDIM steps over `num_base_steps` base steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub num_base_steps: usize,
    /// The network's timestep of step `i` (`use_timesteps[i]`); the loop runs `i` from
    /// `steps - 1` down to 0.
    pub timesteps: Vec<u32>,
    /// The telescoped, clamped cumulative alphas of the respaced schedule.
    pub alphas_cumprod: Vec<f32>,
    /// `[1, alphas_cumprod[..steps - 1]]`.
    pub alphas_cumprod_prev: Vec<f32>,
    /// `1 / sqrt(alphas_cumprod)`.
    pub sqrt_recip: Vec<f32>,
    /// `1 / sqrt(alphas_cumprod / (1 - alphas_cumprod))`.
    pub sqrt_recipm1: Vec<f32>,
}

/// The cosine betas (`get_beta_schedule`, #L12-26): f64, capped at 0.999, cast to f32.
pub fn cosine_betas(n: usize) -> Vec<f32> {
    let alpha_bar = |t: f64| {
        let c = ((t + 0.008) / 1.008 * std::f64::consts::PI / 2.0).cos();
        c * c
    };
    (0..n)
        .map(|i| {
            let (t1, t2) = (i as f64 / n as f64, (i + 1) as f64 / n as f64);
            (1.0 - alpha_bar(t2) / alpha_bar(t1)).min(0.999) as f32
        })
        .collect()
}

/// `torch.cumprod` of f32 on the CPU: a double running product, each output rounded to f32.
fn cumprod(v: impl IntoIterator<Item = f32>) -> Vec<f32> {
    let mut acc = 1f64;
    v.into_iter()
        .map(|x| {
            acc *= x as f64;
            acc as f32
        })
        .collect()
}

/// `space_timesteps` (#L50-58): `round(f32(i) * f32((N - 1) / max(1, n - 1)))`, half to even,
/// clamped to `N - 1`; the first `n` of the `N` entries.
pub fn respaced_timesteps(num_base_steps: usize, steps: usize) -> Vec<u32> {
    let stride = ((num_base_steps - 1) as f64 / (steps.max(2) - 1) as f64) as f32;
    (0..steps)
        .map(|i| ((i as f32 * stride).round_ties_even() as u32).min(num_base_steps as u32 - 1))
        .collect()
}

impl Schedule {
    /// The schedule of `steps` DDIM steps, `1 <= steps <= num_base_steps`.
    pub fn new(num_base_steps: usize, steps: usize) -> Result<Schedule> {
        if num_base_steps < 2 || !(1..=num_base_steps).contains(&steps) {
            return Err(Error::InvalidArgument(format!(
                "{steps} diffusion steps: expected 1 to {num_base_steps} (the model's base steps)"
            )));
        }
        let base = cumprod(cosine_betas(num_base_steps).iter().map(|b| 1.0 - b));
        let timesteps = respaced_timesteps(num_base_steps, steps);
        let ac: Vec<f32> = timesteps.iter().map(|&t| base[t as usize]).collect();
        // betas = 1 - ac / [1, ac[:-1]]; alphas = 1 - betas (#L64-70).
        let alphas = (0..steps).map(|i| {
            let last = if i == 0 { 1.0 } else { ac[i - 1] };
            1.0 - (1.0 - ac[i] / last)
        });
        let alphas_cumprod: Vec<f32> = cumprod(alphas).into_iter().map(|a| a.max(1e-9)).collect();
        let mut alphas_cumprod_prev = vec![1.0];
        alphas_cumprod_prev.extend_from_slice(&alphas_cumprod[..steps - 1]);
        let sqrt_recip = alphas_cumprod.iter().map(|a| 1.0 / a.sqrt()).collect();
        let sqrt_recipm1 = alphas_cumprod
            .iter()
            .map(|a| 1.0 / (a / (1.0 - a)).sqrt())
            .collect();
        Ok(Schedule {
            num_base_steps,
            timesteps,
            alphas_cumprod,
            alphas_cumprod_prev,
            sqrt_recip,
            sqrt_recipm1,
        })
    }

    pub fn steps(&self) -> usize {
        self.timesteps.len()
    }

    /// The coefficients of the DDIM update of step `i` in the layout of
    /// [`crate::ops::DdimParams`]: `[sqrt_recip, sqrt_recipm1, sqrt(prev), sqrt(1 - prev)]`
    /// (`DDIMSampler`, #L113-133).
    pub fn ddim_coef(&self, i: usize) -> [f32; 4] {
        let prev = self.alphas_cumprod_prev[i];
        [
            self.sqrt_recip[i],
            self.sqrt_recipm1[i],
            prev.sqrt(),
            (1.0 - prev).sqrt(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by upstream's `Diffusion(1000)` with PyTorch 2 on the CPU
    /// (`space_timesteps(n)` then `calc_diffusion_vars`), compared exactly.
    #[test]
    fn matches_upstream() {
        let s = Schedule::new(1000, 100).unwrap();
        // f32 rounding of i * 10.0909..: [0, 10, 20, 30, 40, 50, 61, 71, ..., 979, 989, 999].
        assert!(
            s.timesteps
                .windows(2)
                .all(|w| w[1] - w[0] == 10 || w[1] - w[0] == 11)
        );
        assert_eq!(
            &s.timesteps[..12],
            &[0, 10, 20, 30, 40, 50, 61, 71, 81, 91, 101, 111]
        );
        assert_eq!(&s.timesteps[97..], &[979, 989, 999]);
        let ac = |i: usize| s.alphas_cumprod[i] as f64;
        assert_eq!(ac(0), 0.9999586939811707);
        assert_eq!(ac(1), 0.9992788434028625);
        assert_eq!(ac(50), 0.4844944179058075);
        assert_eq!(ac(99), 2.4318691504987555e-09);
        assert_eq!(s.alphas_cumprod_prev[99] as f64, 0.0002428571169730276);
        assert_eq!(s.sqrt_recip[99] as f64, 20278.22265625);
        assert_eq!(s.sqrt_recipm1[50] as f64, 1.0315072536468506);
        assert_eq!(s.sqrt_recipm1[0] as f64, 0.006427108775824308);

        let s = Schedule::new(1000, 10).unwrap();
        assert_eq!(
            s.timesteps,
            [0, 111, 222, 333, 444, 555, 666, 777, 888, 999]
        );
        assert_eq!(s.alphas_cumprod[9] as f64, 1.7659425033400566e-09);
        assert_eq!(s.alphas_cumprod_prev[9] as f64, 0.029627598822116852);
        assert_eq!(s.sqrt_recipm1[1] as f64, 0.1887844353914261);

        let s = Schedule::new(1000, 1000).unwrap();
        assert_eq!(s.timesteps[500], 500);
        assert_eq!(s.alphas_cumprod[999] as f64, 2.4287358790786584e-09);
        assert_eq!(s.alphas_cumprod_prev[999] as f64, 2.428767174933455e-06);

        // One step: timestep 0 only, prev 1, so the DDIM update returns x0.
        let s = Schedule::new(1000, 1).unwrap();
        assert_eq!(s.timesteps, [0]);
        assert_eq!(s.ddim_coef(0)[2..], [1.0, 0.0]);
    }

    #[test]
    fn step_counts_outside_the_base_schedule_are_refused() {
        for steps in [0, 1001] {
            let e = Schedule::new(1000, steps).unwrap_err().to_string();
            assert!(e.contains("1 to 1000"), "{e}");
        }
    }
}
