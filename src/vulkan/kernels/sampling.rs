//! The sampler's ops: the DDIM step, classifier-free guidance, argmax and Gumbel-max
//! sampling (with its test hook, the per-element noise).

use super::super::recording::Arg::{Absent, In, Out};
use super::super::recording::{Dispatch, VulkanRecording};
use super::super::shaders::{Shader, push};
use super::{Ref, elementwise, u32_of};
use crate::error::Result;
use crate::ops::{ArgmaxParams, CfgParams, DdimParams, GumbelParams};

pub(crate) fn ddim(
    rec: &mut VulkanRecording,
    p: &DdimParams,
    xt: &Ref,
    x0: &Ref,
    coef: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "ddim";
    let push = push::Ddim {
        n: u32_of(OP, "n", p.n)?,
        ..Default::default()
    };
    let args = [In(xt), In(x0), In(coef), Out(out)];
    elementwise(rec, OP, Shader::Ddim, &args, push, p.n)
}

pub(crate) fn cfg(rec: &mut VulkanRecording, p: &CfgParams, rows: &Ref, out: &Ref) -> Result<()> {
    const OP: &str = "cfg";
    let push = push::Cfg {
        n: u32_of(OP, "n", p.n)?,
        rows: u32_of(OP, "rows", p.rows)?,
        w_text: p.w_text,
        w_constraint: p.w_constraint,
        ..Default::default()
    };
    elementwise(rec, OP, Shader::Cfg, &[In(rows), Out(out)], push, p.n)
}

/// Workgroup size of the one-row-per-workgroup reductions (argmax.glsl): a power of two,
/// 64 for short rows so few invocations idle, 256 for long ones.
fn argmax_workgroup(rec: &VulkanRecording, cols: usize) -> u32 {
    let l = rec.limits();
    let want: u32 = if cols <= 512 { 64 } else { 256 };
    let cap = want
        .min(l.max_workgroup_size[0])
        .min(l.max_workgroup_invocations);
    1 << cap.ilog2()
}

pub(crate) fn argmax(
    rec: &mut VulkanRecording,
    p: &ArgmaxParams,
    x: &Ref,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "argmax";
    let push = push::Argmax {
        rows: u32_of(OP, "rows", p.rows)?,
        cols: u32_of(OP, "cols", p.cols)?,
        ..Default::default()
    };
    u32_of(OP, "rows * cols", p.rows * p.cols)?;
    let wg = argmax_workgroup(rec, p.cols);
    let groups = rec.grid(OP, p.rows as u64, 1)?;
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Argmax,
        spec: &[wg],
        args: &[In(x), Out(out)],
        push,
        groups,
    })
}

/// The push constants of the gumbel shader.
fn gumbel_push(op: &'static str, p: &GumbelParams, injected: bool) -> Result<push::Gumbel> {
    u32_of(op, "rows * cols", p.rows * p.cols)?;
    Ok(push::Gumbel {
        rows: u32_of(op, "rows", p.rows)?,
        cols: u32_of(op, "cols", p.cols)?,
        t: p.temperature.max(1e-10),
        seed: [p.seed as u32, (p.seed >> 32) as u32],
        counter: [p.counter as u32, (p.counter >> 32) as u32],
        has_uniforms: u32::from(injected),
        ..Default::default()
    })
}

/// `logits`, `uniforms`, `out` as checked by `check::gumbel`.
pub(crate) fn gumbel(
    rec: &mut VulkanRecording,
    p: &GumbelParams,
    logits: &Ref,
    uniforms: Option<&Ref>,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "gumbel";
    let push = gumbel_push(OP, p, uniforms.is_some())?;
    let wg = argmax_workgroup(rec, p.cols);
    let groups = rec.grid(OP, p.rows as u64, 1)?;
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Gumbel,
        spec: &[wg, 0],
        args: &[In(logits), uniforms.map_or(Absent, In), Out(out)],
        push,
        groups,
    })
}

/// Test hook of the gumbel shader: for each of the `rows * cols` elements, the uniform the
/// sampler uses and its noise `g(u)`, as f32 bits in `out[2 i]` and `out[2 i + 1]` (u32,
/// `2 rows cols` elements). `uniforms` as in [`gumbel`]; the logits are not read.
#[cfg(test)]
pub(crate) fn gumbel_noise(
    rec: &mut VulkanRecording,
    p: &GumbelParams,
    uniforms: Option<&Ref>,
    out: &Ref,
) -> Result<()> {
    const OP: &str = "gumbel_noise";
    let n = p.rows * p.cols;
    let push = gumbel_push(OP, p, uniforms.is_some())?;
    let wg = rec.elementwise_workgroup();
    let groups = rec.grid(OP, n as u64, wg)?;
    rec.dispatch(Dispatch {
        op: OP,
        shader: Shader::Gumbel,
        spec: &[wg, 1],
        args: &[Absent, uniforms.map_or(Absent, In), Out(out)],
        push,
        groups,
    })
}

#[cfg(test)]
mod device_tests {
    use super::*;
    use crate::backend::{Backend, BufRef, Precision};
    use crate::rng;
    use crate::sampling::gumbel_noise as cpu_noise;
    use crate::tensor::DType;
    use crate::vulkan::backend::GUMBEL_NOISE_ULP;
    use crate::vulkan::{VulkanBackend, VulkanOptions, probe};

    /// A backend on the first Vulkan device; None (said on stderr) when there is none, which
    /// fails instead under `KINEMA_REQUIRE_VULKAN=1` (CI installs lavapipe).
    fn device() -> Option<VulkanBackend> {
        let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
        match probe() {
            Ok(d) => {
                let mut o = VulkanOptions::new(Precision::Strict);
                o.device = Some(d[0].index);
                Some(VulkanBackend::with_options(o).unwrap())
            }
            Err(why) => {
                assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
                eprintln!("skipping: {why}");
                None
            }
        }
    }

    /// `(u, g(u))` of every element, from the shader's test hook.
    fn noise(b: &VulkanBackend, p: &GumbelParams, uniforms: Option<&[f32]>) -> Vec<(f32, f32)> {
        let n = p.rows * p.cols;
        let u = uniforms.map(|u| {
            let r = BufRef::new(b.alloc(DType::F32, n).unwrap(), DType::F32, n);
            b.write(&r, bytemuck::cast_slice(u)).unwrap();
            r
        });
        let out = BufRef::new(b.alloc(DType::U32, 2 * n).unwrap(), DType::U32, 2 * n);
        let mut rec = b.begin().unwrap();
        gumbel_noise(&mut rec, p, u.as_ref(), &out).unwrap();
        b.submit(&rec).unwrap();
        let mut bytes = vec![0u8; 8 * n];
        b.read(&out, &mut bytes).unwrap();
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        words
            .chunks(2)
            .map(|w| (f32::from_bits(w[0]), f32::from_bits(w[1])))
            .collect()
    }

    /// `|got - want|` in units of `want`'s ulp, after the 2^-22 absolute allowance.
    fn noise_ulps(got: f32, want: f32) -> f32 {
        if got.to_bits() == want.to_bits() {
            return 0.0;
        }
        let ulp = f32::from_bits(want.abs().to_bits() + 1) - want.abs();
        ((got - want).abs() - 2f32.powi(-22)).max(0.0) / ulp
    }

    #[test]
    fn gumbel_uniforms_are_the_cpu_stream() {
        let Some(b) = device() else { return };
        // A carry out of the counter's low half, and seeds with every bit set.
        for (seed, counter) in [
            (42, 0),
            (0xdead_beef_0123_4567, (1 << 32) - 300_000),
            (u64::MAX, u64::MAX - 2_000_000),
        ] {
            let p = GumbelParams {
                rows: 1000,
                cols: 1000,
                temperature: 1.0,
                seed,
                counter,
            };
            let mut worst = 0f32;
            for (i, (u, g)) in noise(&b, &p, None).into_iter().enumerate() {
                let want = rng::uniform(seed, counter + i as u64);
                assert_eq!(u.to_bits(), want.to_bits(), "seed {seed:#x} uniform {i}");
                worst = worst.max(noise_ulps(g, cpu_noise(u)));
            }
            eprintln!("seed {seed:#x}: g(u) within {worst} ulp of the CPU's");
            assert!(worst <= GUMBEL_NOISE_ULP, "g(u) off by {worst} ulp");
        }
    }

    #[test]
    fn gumbel_noise_of_injected_uniforms() {
        let Some(b) = device() else { return };
        let mut u = vec![
            0.0,
            -0.0,
            1e-45,
            1e-30,
            1e-20,
            1.000_000_1e-20,
            0.5,
            0.999_999_94,
            1.0,
            2.0,
            -1.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        let k = u.len();
        u.extend((0..1000 - k).map(|i| ((i as f32 + 0.5) / (1000 - k) as f32).powi(3)));
        let p = GumbelParams {
            rows: 10,
            cols: 100,
            temperature: 1.0,
            seed: 0,
            counter: 0,
        };
        for (i, (got_u, g)) in noise(&b, &p, Some(&u)).into_iter().enumerate() {
            assert_eq!(got_u.to_bits(), u[i].to_bits());
            let want = cpu_noise(u[i]);
            let e = noise_ulps(g, want);
            assert!(e <= GUMBEL_NOISE_ULP, "u = {:e}: g {g} vs {want}", u[i]);
        }
    }
}
