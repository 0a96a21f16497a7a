//! Vulkan-specific behaviour: re-submitting one recording, hazard-tracked barriers, operands
//! bound in ranges under a small binding limit, record-time errors, device selection,
//! descriptor pools, profiling, the pipeline cache, and a graph compiled unchanged onto
//! Vulkan. Every test runs on each Vulkan device (lavapipe in CI) and prints why when there is
//! none; `KINEMA_REQUIRE_VULKAN=1` turns that into a failure.

mod common;

use common::gemm::*;
use common::*;
use half::f16;
use kinema::backend::{Backend, BufRef, Precision};
use kinema::cpu::{self, CpuBackend, Weights};
use kinema::graph::Graph;
use kinema::ops::*;
use kinema::tensor::{DType, HostTensor, Q8_0_BLOCK_BYTES, q8_0_quantize_block};
use kinema::vulkan::{VulkanBackend, VulkanOptions};

/// Options for each Vulkan device, or none (with the reason printed).
fn devices() -> Vec<VulkanOptions> {
    let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
    match kinema::vulkan::probe() {
        Ok(ds) => ds
            .iter()
            .map(|d| {
                let mut o = VulkanOptions::new(Precision::Strict);
                o.device = Some(d.index);
                o
            })
            .collect(),
        Err(why) => {
            assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
            eprintln!("skipping: {why}");
            Vec::new()
        }
    }
}

fn backends() -> Vec<VulkanBackend> {
    devices()
        .into_iter()
        .map(|o| VulkanBackend::with_options(o).expect("Vulkan backend"))
        .collect()
}

type VRef = BufRef<kinema::vulkan::VulkanBuffer>;

/// erfc(t) for t >= 2.5 by its continued fraction (Lentz), to ~1e-15 relative: the f64
/// oracle for GELU's negative tail, where `1 + erf` in the CPU reference cancels.
fn erfc_tail(t: f64) -> f64 {
    let (tiny, mut f) = (1e-300, t);
    let (mut c, mut d) = (t, 0.0);
    for i in 1..300 {
        let a = i as f64 / 2.0;
        d = t + a * d;
        d = if d.abs() < tiny { tiny } else { 1.0 / d };
        c = t + a / c;
        c = if c.abs() < tiny { tiny } else { c };
        f *= c * d;
        if (c * d - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-t * t).exp() / (f * std::f64::consts::PI.sqrt())
}

/// Exact GELU (erf written out in `common.glsl`) and SiLU to a few ulp of an f64 oracle over
/// [-11, 12] (where the outputs stay normal f32 numbers).
#[test]
fn activations_are_accurate_to_a_few_ulp() {
    fn ulps(got: f32, want: f32) -> f32 {
        let w = want.abs();
        let ulp = f32::from_bits(w.to_bits() + 1) - w;
        (got - want).abs() / ulp
    }
    fn oracle(act: Activation, x: f32) -> f32 {
        let t = -(x as f64) / std::f64::consts::SQRT_2;
        match act {
            Activation::Gelu if t >= 2.5 => (0.5 * x as f64 * erfc_tail(t)) as f32,
            _ => cpu::activation::reference::apply(act, x),
        }
    }
    let x: Vec<f32> = (0..=23000).map(|i| -11.0 + i as f32 * 1e-3).collect();
    for b in backends() {
        let xb = upload_f32(&b, &x);
        let y = alloc(&b, DType::F32, x.len());
        // (activation, max ulp): erfc and exp are within 4 and 1 ulp, plus the roundings of
        // the formula around them and a division that Vulkan lets be 2.5 ulp off (lavapipe
        // measures 5 and 2).
        for (act, bound) in [(Activation::Gelu, 8.0), (Activation::Silu, 6.0)] {
            let mut rec = b.begin().unwrap();
            b.activation(&mut rec, act, &xb, &y).unwrap();
            b.submit(&rec).unwrap();
            let got = download_f32(&b, &y);
            let (worst, at) = x
                .iter()
                .zip(&got)
                .map(|(&v, &g)| (ulps(g, oracle(act, v)), v))
                .fold((0f32, 0f32), |a, b| if b.0 > a.0 { b } else { a });
            assert!(
                worst <= bound,
                "{act:?}: {worst} ulp at x = {at} on {}",
                b.device_name()
            );
        }
    }
}

/// 100 diffusion steps as 100 submissions of one recording: each step the host rewrites the
/// coefficient buffer, and the recording carries its state from one step to the next
/// (`x0 = 0.9 x`, `x = ddim(x, x0, coef)`, written back into `x`). Bit-identical to the same
/// loop on the CPU backend.
#[test]
fn one_recording_resubmitted_for_100_steps() {
    fn steps<B: Backend>(b: &B, x_init: &[f32]) -> Vec<f32> {
        let n = x_init.len();
        let x = upload_f32(b, x_init);
        let x0 = alloc(b, DType::F32, n);
        let next = alloc(b, DType::F32, n);
        let coef = alloc(b, DType::F32, 4);
        let mut rec = b.begin().unwrap();
        b.scale(&mut rec, 0.9, &x, &x0).unwrap();
        b.ddim(&mut rec, &DdimParams { n }, &x, &x0, &coef, &next)
            .unwrap();
        let p = CopyParams {
            shape: vec![n],
            src_strides: vec![1],
            src_offset: 0,
            dst_strides: vec![1],
            dst_offset: 0,
        };
        b.copy(&mut rec, &p, &next, &x).unwrap();
        for step in 0..100 {
            let t = 1.0 - step as f32 / 100.0;
            let c = [
                1.0 / t.sqrt(),
                (1.0 / t - 1.0).sqrt().max(0.1),
                0.99,
                0.1 + 0.001 * step as f32,
            ];
            b.write(&coef, bytemuck::cast_slice(&c)).unwrap();
            b.submit(&rec).unwrap();
        }
        download_f32(b, &x)
    }
    let mut r = Rng(21);
    let x = r.vec(3001, -1.0, 1.0);
    let want = steps(&CpuBackend::new(Precision::Strict).unwrap(), &x);
    for b in backends() {
        assert_eq!(steps(&b, &x), want, "{}", b.device_name());
    }
}

/// Dependent ops get a barrier each; ops that read the same input and write disjoint outputs
/// (or disjoint ranges of one buffer) get none; overlapping writes get one.
#[test]
fn barriers_only_on_hazards() {
    let mut r = Rng(22);
    for b in backends() {
        let n = 1000;
        let xv = r.vec(n, -2.0, 2.0);
        let x = upload_f32(&b, &xv);
        // A chain x -> a -> c -> d: read-after-write twice, plus write-after-read when d
        // reuses a's buffer.
        let a = alloc(&b, DType::F32, n);
        let c = alloc(&b, DType::F32, n);
        let mut rec = b.begin().unwrap();
        b.scale(&mut rec, 2.0, &x, &a).unwrap();
        b.activation(&mut rec, Activation::Silu, &a, &c).unwrap();
        b.scale(&mut rec, -0.5, &c, &a).unwrap();
        assert_eq!((rec.dispatches(), rec.barriers()), (3, 2));
        b.submit(&rec).unwrap();
        let mut want = vec![0f32; n];
        let twice: Vec<f32> = xv.iter().map(|v| 2.0 * v).collect();
        cpu::activation::reference::activation(Activation::Silu, &twice, &mut want);
        let want: Vec<f32> = want.iter().map(|v| -0.5 * v).collect();
        assert_close("chain", &download_f32(&b, &a), &want, 1e-6, 2e-6);

        // Independent: three outputs of one input, and two halves of one buffer.
        let outs: Vec<VRef> = (0..3).map(|_| alloc(&b, DType::F32, n)).collect();
        let halves = alloc(&b, DType::F32, 2 * n);
        let mut rec = b.begin().unwrap();
        for (i, o) in outs.iter().enumerate() {
            b.scale(&mut rec, i as f32, &x, o).unwrap();
        }
        b.scale(&mut rec, 3.0, &x, &halves.slice(0, n).unwrap())
            .unwrap();
        b.scale(&mut rec, 4.0, &x, &halves.slice(n, n).unwrap())
            .unwrap();
        assert_eq!((rec.dispatches(), rec.barriers()), (5, 0));
        // Overlapping the first half again: write-after-write.
        b.scale(&mut rec, 5.0, &x, &halves.slice(n / 2, n).unwrap())
            .unwrap();
        assert_eq!(rec.barriers(), 1);
        b.submit(&rec).unwrap();
        b.sync().unwrap();
        for (i, o) in outs.iter().enumerate() {
            let want: Vec<f32> = xv.iter().map(|v| i as f32 * v).collect();
            assert_eq!(download_f32(&b, o), want);
        }
        let got = download_f32(&b, &halves);
        let want: Vec<f32> = (0..2 * n)
            .map(|j| match j {
                j if j < n / 2 => 3.0 * xv[j],
                j if j < 3 * n / 2 => 5.0 * xv[j - n / 2],
                j => 4.0 * xv[j - n],
            })
            .collect();
        assert_eq!(got, want);
    }
}

/// With a 4 KiB binding limit a 25 KiB weight matrix is bound in ranges (one dispatch per
/// group of weight rows) and gives the same result; an elementwise operand over the limit is
/// refused with the limit and the size in the message.
#[test]
fn weights_larger_than_a_binding_are_split() {
    let mut r = Rng(23);
    for mut o in devices() {
        o.max_binding = Some(4096);
        let b = VulkanBackend::with_options(o).unwrap();
        assert_eq!(b.max_binding(), 4096);
        let (m, n, k) = (3, 100, 64);
        let x = r.vec(m * k, -1.0, 1.0);
        let w = r.vec(n * k, -1.0, 1.0);
        let bias = r.vec(n, -1.0, 1.0);
        let mut wq = vec![0u8; n * k / 32 * Q8_0_BLOCK_BYTES];
        for (blk, out) in w.chunks(32).zip(wq.chunks_mut(Q8_0_BLOCK_BYTES)) {
            q8_0_quantize_block(blk, out);
        }
        for (dt, bytes, wref) in [
            (
                DType::F32,
                bytemuck::cast_slice(&w).to_vec(),
                Weights::F32(&w),
            ),
            (DType::Q8_0, wq.clone(), Weights::Q8_0(&wq)),
        ] {
            let p = LinearParams {
                m,
                n,
                k,
                activation: Activation::Relu,
            };
            let mut want = vec![0f32; m * n];
            cpu::matmul::reference::linear(&p, &x, wref, Some(&bias), &mut want);
            let (xb, wb, bb) = (
                upload_f32(&b, &x),
                upload(&b, dt, &bytes, n * k),
                upload_f32(&b, &bias),
            );
            let y = alloc(&b, DType::F32, m * n);
            let mut rec = b.begin().unwrap();
            b.linear(&mut rec, &p, &xb, &wb, Some(&bb), &y).unwrap();
            assert!(rec.dispatches() > 1, "{dt}: {} dispatch", rec.dispatches());
            b.submit(&rec).unwrap();
            assert_close(
                &format!("split linear {dt}"),
                &download_f32(&b, &y),
                &want,
                1e-4,
                2e-6,
            );
        }
        let big = alloc(&b, DType::F32, 2048);
        let out = alloc(&b, DType::F32, 2048);
        let mut rec = b.begin().unwrap();
        let e = b.scale(&mut rec, 2.0, &big, &out).unwrap_err().to_string();
        assert!(
            e.contains("scale") && e.contains("8192") && e.contains("4096"),
            "{e}"
        );
    }
}

/// More elements than 65535 workgroups of 256 hold along x: the grid spreads over y.
#[test]
fn large_elementwise_uses_a_2d_grid() {
    for b in backends() {
        let n = 65535 * 256 + 1000;
        let xv: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
        let x = upload_f32(&b, &xv);
        let y = alloc(&b, DType::F32, n);
        let mut rec = b.begin().unwrap();
        b.scale(&mut rec, 0.5, &x, &y).unwrap();
        b.submit(&rec).unwrap();
        let got = download_f32(&b, &y);
        assert!(got.iter().zip(&xv).all(|(g, v)| *g == 0.5 * v));
    }
}

/// Staged writes wait for the next submission: a later write over a pending one wins, a
/// recording submitted after a write reads the written values, and `read_many` returns what
/// `read` does for each range (mapped and staged alike).
#[test]
fn deferred_writes_keep_their_order_and_read_many_matches_read() {
    for mut o in devices() {
        for staged in [false, true] {
            o.force_staging = staged;
            let b = VulkanBackend::with_options(o.clone()).unwrap();
            let n = 1000;
            let a = BufRef::new(b.alloc(DType::F32, n).unwrap(), DType::F32, n);
            let c = BufRef::new(b.alloc(DType::F32, n).unwrap(), DType::F32, n);
            let first: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let second: Vec<f32> = (0..100).map(|i| -(i as f32)).collect();
            b.write(&a, bytemuck::cast_slice(&first)).unwrap();
            b.write(&a.slice(50, 100).unwrap(), bytemuck::cast_slice(&second))
                .unwrap();
            let mut want = first.clone();
            want[50..150].copy_from_slice(&second);
            // c = 0.5 a, recorded before the writes are flushed.
            let mut rec = b.begin().unwrap();
            b.scale(&mut rec, 0.5, &a, &c).unwrap();
            b.submit(&rec).unwrap();
            let (mut x, mut y, mut z) = (vec![0f32; n], vec![0f32; 10], vec![0f32; n]);
            b.read_many(&mut [
                (&a, bytemuck::cast_slice_mut(&mut x)),
                (&c.slice(3, 10).unwrap(), bytemuck::cast_slice_mut(&mut y)),
            ])
            .unwrap();
            assert_eq!(x, want, "staged {staged}");
            let half: Vec<f32> = want.iter().map(|v| 0.5 * v).collect();
            assert_eq!(y, half[3..13], "staged {staged}");
            b.read(&c, bytemuck::cast_slice_mut(&mut z)).unwrap();
            assert_eq!(z, half, "staged {staged}");
            // A write after the run, then the same recording again.
            b.write(
                &a.slice(0, 3).unwrap(),
                bytemuck::cast_slice(&[8f32, 9.0, 10.0]),
            )
            .unwrap();
            b.submit(&rec).unwrap();
            b.read(
                &c.slice(0, 4).unwrap(),
                bytemuck::cast_slice_mut(&mut y[..4]),
            )
            .unwrap();
            assert_eq!(y[..4], [4.0, 4.5, 5.0, 1.5], "staged {staged}");
        }
    }
}

/// A process may create and drop backends many times (a host that loads and unloads engines,
/// this test binary): on the H200 the 20th-40th fresh instance used to fail with "Unable to
/// find a Vulkan driver" (the driver's static-TLS library could no longer be loaded after
/// that many load/unload cycles; `src/vulkan/loader.rs` keeps it loaded). Each backend here
/// also runs a transfer, and `probe` runs between them.
#[test]
fn backends_can_be_created_and_dropped_many_times() {
    for o in devices() {
        for i in 0..64u32 {
            let b = VulkanBackend::with_options(o.clone())
                .unwrap_or_else(|e| panic!("backend {i} of 64: {e}"));
            let v = [i as f32, 1.5, -2.0];
            assert_eq!(download_f32(&b, &upload_f32(&b, &v)), v, "backend {i}");
            drop(b);
            if i % 8 == 0 {
                assert!(
                    kinema::vulkan::probe().is_ok_and(|d| !d.is_empty()),
                    "probe {i}"
                );
            }
        }
    }
}

/// Writes and reads of sub-ranges at odd 2-byte offsets, through mapped memory and through
/// the staging buffer (in chunks when larger than it), leave the rest of the buffer intact.
#[test]
fn host_transfers_round_trip() {
    let mut r = Rng(26);
    for mut o in devices() {
        for staged in [false, true] {
            o.force_staging = staged;
            let b = VulkanBackend::with_options(o.clone()).unwrap();
            // 64 MiB + 6 bytes: more than one staging chunk.
            let n = (64 << 19) + 3;
            let buf = BufRef::new(b.alloc(DType::F16, n).unwrap(), DType::F16, n);
            if staged {
                assert!(!buf.buf.is_mapped());
            }
            let mut want = vec![0u16; n];
            let mut got = vec![0u16; n];
            b.read(&buf, bytemuck::cast_slice_mut(&mut got)).unwrap();
            assert!(got.iter().all(|&v| v == 0), "alloc zero-fills");
            for (start, len) in [(1, 5), (7, n - 9), (n - 1, 1)] {
                let v: Vec<u16> = (0..len).map(|_| r.next_u64() as u16).collect();
                b.write(&buf.slice(start, len).unwrap(), bytemuck::cast_slice(&v))
                    .unwrap();
                want[start..start + len].copy_from_slice(&v);
            }
            b.read(&buf, bytemuck::cast_slice_mut(&mut got)).unwrap();
            assert!(got == want, "staged {staged}");
            let mut part = vec![0u16; 3];
            b.read(
                &buf.slice(5, 3).unwrap(),
                bytemuck::cast_slice_mut(&mut part),
            )
            .unwrap();
            assert_eq!(part, want[5..8]);
        }
    }
}

/// A model's upload: many large writes in a row, more than both staging buffers hold, into
/// several buffers and read back only at the end. The host fills one staging buffer while the
/// queue copies the other out; every byte must land where it was written, whichever buffer
/// carried it and however the copies overlapped (mapped writes take the parallel copy).
#[test]
fn a_stream_of_large_writes_lands_intact() {
    for mut o in devices() {
        for staged in [false, true] {
            o.force_staging = staged;
            let b = VulkanBackend::with_options(o.clone()).unwrap();
            // 5 x 40 MiB + a few odd sizes: 5 staging flushes at least, both buffers reused.
            let sizes = [
                40 << 18,
                3,
                40 << 18,
                (40 << 18) + 5,
                40 << 18,
                17,
                40 << 18,
            ];
            let bufs: Vec<_> = sizes
                .iter()
                .map(|&n| BufRef::new(b.alloc(DType::U32, n).unwrap(), DType::U32, n))
                .collect();
            let data: Vec<Vec<u32>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    (0..n as u32)
                        .map(|j| j.wrapping_mul(2654435761) ^ i as u32)
                        .collect()
                })
                .collect();
            for (buf, v) in bufs.iter().zip(&data) {
                b.write(buf, bytemuck::cast_slice(v)).unwrap();
            }
            // A second write over the first buffer's middle, after all the others.
            let patch: Vec<u32> = (0..1000).collect();
            b.write(
                &bufs[0].slice(12345, 1000).unwrap(),
                bytemuck::cast_slice(&patch),
            )
            .unwrap();
            for (i, (buf, v)) in bufs.iter().zip(&data).enumerate() {
                let mut got = vec![0u32; v.len()];
                b.read(buf, bytemuck::cast_slice_mut(&mut got)).unwrap();
                let mut want = v.clone();
                if i == 0 {
                    want[12345..13345].copy_from_slice(&patch);
                }
                let bad = got.iter().zip(&want).position(|(g, w)| g != w);
                assert!(
                    bad.is_none(),
                    "staged {staged}: buffer {i} differs at {bad:?}"
                );
            }
        }
    }
}

/// Record-time errors: wrong dtypes, short buffers, a recording used after it was submitted,
/// and buffers or recordings of another backend.
#[test]
fn bad_input_is_refused_when_recorded() {
    for b in backends().iter() {
        let x = alloc(b, DType::F32, 8);
        let y = alloc(b, DType::F32, 8);
        let u = alloc(b, DType::U32, 8);
        let mut rec = b.begin().unwrap();
        let e = b.scale(&mut rec, 1.0, &u, &y).unwrap_err().to_string();
        assert!(e.contains("scale") && e.contains("u32"), "{e}");
        let e = b
            .binary(
                &mut rec,
                &BinaryParams {
                    op: BinaryOp::Add,
                    n: 16,
                    b_len: 8,
                },
                &x,
                &x,
                &y,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("binary") && e.contains("needs 16"), "{e}");
        let e = b
            .ddim(
                &mut rec,
                &DdimParams { n: 8 },
                &x,
                &x,
                &x.slice(0, 3).unwrap(),
                &y,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("coef") && e.contains("needs 4"), "{e}");
        let w = b
            .bind_host(&HostTensor::from_f32(&[8], &[1.0; 8]).unwrap())
            .unwrap();
        let w = BufRef::new(w, DType::F32, 8);
        let e = b.scale(&mut rec, 1.0, &x, &w).unwrap_err().to_string();
        assert!(e.contains("read-only"), "{e}");
        assert!(b.write(&w, &[0; 32]).is_err());
        assert_eq!(rec.dispatches(), 0);
        b.scale(&mut rec, 1.0, &x, &y).unwrap();
        b.submit(&rec).unwrap();
        let e = b.scale(&mut rec, 1.0, &x, &y).unwrap_err().to_string();
        assert!(e.contains("already submitted"), "{e}");
        // Another backend on the same device.
        let mut o = VulkanOptions::new(Precision::Strict);
        o.device = Some(b.device_index());
        let other = VulkanBackend::with_options(o).unwrap();
        let mut rec2 = other.begin().unwrap();
        let e = other.scale(&mut rec2, 1.0, &x, &y).unwrap_err().to_string();
        assert!(e.contains("another Vulkan backend"), "{e}");
        assert!(b.submit(&rec2).is_err());
        assert!(other.read(&x, &mut [0; 32]).is_err());
    }
}

#[test]
fn device_out_of_range_is_a_clear_error() {
    if devices().is_empty() {
        return;
    }
    let mut o = VulkanOptions::new(Precision::Strict);
    o.device = Some(99);
    let e = VulkanBackend::with_options(o).err().unwrap().to_string();
    assert!(
        e.contains("vulkan")
            && e.contains("device 99")
            && e.contains("KINEMA_VK_DEVICE")
            && e.contains("[0]"),
        "{e}"
    );
    // The same through the environment variable, end to end in the command-line tool.
    let out = bench_add_cli(&[("KINEMA_VK_DEVICE", "99")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("device 99"), "{err}");
}

/// `kinema bench --backend vulkan --op add --shape 64 --samples 1` with `env` added to the
/// environment (the variables reach only that process).
fn bench_add_cli(env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kinema"))
        .args([
            "bench",
            "--backend",
            "vulkan",
            "--op",
            "add",
            "--shape",
            "64",
            "--samples",
            "1",
        ])
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// `0.5 x` on `b`.
fn halve<B: Backend>(b: &B, x: &[f32]) -> Vec<f32> {
    let xi = upload_f32(b, x);
    let y = alloc(b, DType::F32, x.len());
    let mut rec = b.begin().unwrap();
    b.scale(&mut rec, 0.5, &xi, &y).unwrap();
    b.submit(&rec).unwrap();
    download_f32(b, &y)
}

/// A buffer larger than the device allows (1 TiB: beyond lavapipe's largest allocation, its
/// memory heap and this machine's memory; beyond the H200's too) is refused with the typed
/// out-of-memory error before anything is allocated, and afterwards the same Vulkan backend
/// and the CPU backend both still run an op (issue 10, part 3).
#[test]
fn an_allocation_beyond_the_device_is_a_typed_error() {
    let x: Vec<f32> = (0..64).map(|i| i as f32 - 20.0).collect();
    let want: Vec<f32> = x.iter().map(|v| v * 0.5).collect();
    for b in backends() {
        for (dtype, len) in [(DType::F32, 1usize << 38), (DType::F16, 1 << 39)] {
            let e = b.alloc(dtype, len).expect_err("a 1 TiB buffer is refused");
            let msg = e.to_string();
            assert!(
                matches!(
                    e,
                    kinema::Error::Backend {
                        backend: "vulkan",
                        ..
                    }
                ) && msg.contains("out of device memory")
                    && msg.contains("1099511627776-byte buffer")
                    && msg.contains("maximum of this device"),
                "{msg}"
            );
        }
        assert_eq!(halve(&b, &x), want, "the Vulkan backend still runs");
    }
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    assert_eq!(
        halve(&cpu, &x),
        want,
        "the CPU backend runs in the same process"
    );
}

/// The same ops through descriptor pools instead of VK_KHR_push_descriptor.
#[test]
fn descriptor_pool_fallback() {
    let mut r = Rng(24);
    for mut o in devices() {
        o.descriptor_pools = true;
        let b = VulkanBackend::with_options(o).unwrap();
        assert!(!b.uses_push_descriptors());
        let (m, n, k) = (5, 300, 32);
        let x = r.vec(m * k, -1.0, 1.0);
        let w: Vec<f16> = r
            .vec(n * k, -1.0, 1.0)
            .iter()
            .map(|&v| f16::from_f32(v))
            .collect();
        let p = LinearParams {
            m,
            n,
            k,
            activation: Activation::GeluTanh,
        };
        let mut want = vec![0f32; m * n];
        cpu::matmul::reference::linear(&p, &x, Weights::F16(&w), None, &mut want);
        let (xb, wb) = (
            upload_f32(&b, &x),
            upload(&b, DType::F16, bytemuck::cast_slice(&w), n * k),
        );
        let y = alloc(&b, DType::F32, m * n);
        let z = alloc(&b, DType::F32, m * n);
        let mut rec = b.begin().unwrap();
        // More dispatches than one descriptor pool holds sets.
        for _ in 0..150 {
            b.linear(&mut rec, &p, &xb, &wb, None, &y).unwrap();
            b.scale(&mut rec, 1.0, &y, &z).unwrap();
        }
        b.submit(&rec).unwrap();
        assert_close("linear via pools", &download_f32(&b, &z), &want, 1e-4, 2e-6);
    }
}

#[test]
fn profile_reports_each_op() {
    for mut o in devices() {
        o.profile = true;
        let b = VulkanBackend::with_options(o).unwrap();
        let x = upload_f32(&b, &[1.0; 256]);
        let y = alloc(&b, DType::F32, 256);
        let z = alloc(&b, DType::F32, 256);
        let mut rec = b.begin().unwrap();
        b.scale(&mut rec, 2.0, &x, &y).unwrap();
        b.scale(&mut rec, 2.0, &y, &z).unwrap();
        b.activation(&mut rec, Activation::Relu, &z, &y).unwrap();
        b.submit(&rec).unwrap();
        let rows = b.last_profile();
        let count = |op: &str| rows.iter().find(|r| r.op == op).map(|r| r.count);
        assert_eq!(
            (count("scale"), count("activation")),
            (Some(2), Some(1)),
            "{rows:?}"
        );
        assert!(rows.iter().all(|r| r.total_ms >= 0.0 && r.total_ms < 1e4));
    }
}

#[test]
fn pipeline_cache_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    for mut o in devices() {
        o.pipeline_cache_dir = Some(dir.path().join("cache"));
        for run in 0..2 {
            let b = VulkanBackend::with_options(o.clone()).unwrap();
            let x = upload_f32(&b, &[3.0; 64]);
            let y = alloc(&b, DType::F32, 64);
            let mut rec = b.begin().unwrap();
            b.activation(&mut rec, Activation::Gelu, &x, &y).unwrap();
            b.submit(&rec).unwrap();
            assert!(
                (download_f32(&b, &y)[0] - 2.9959502).abs() < 1e-6,
                "run {run}"
            );
            assert_eq!(b.pipelines_created(), 1);
            b.save_pipeline_cache().unwrap();
            let files: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
                .unwrap()
                .collect();
            assert_eq!(files.len(), 1, "run {run}");
        }
    }
}

/// A graph of ops with Vulkan kernels compiles unchanged onto Vulkan and matches the CPU
/// backend over three runs with new inputs.
#[test]
fn graph_runs_on_vulkan_as_on_cpu() {
    let (m, k, h) = (6, 32, 40);
    let mut r = Rng(25);
    let w1: Vec<f16> = r
        .vec(h * k, -0.5, 0.5)
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let b1 = r.vec(h, -0.5, 0.5);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[m, k]).unwrap();
    let coef = g.input("coef", DType::F32, &[4]).unwrap();
    let w1t = g
        .weight("w1", HostTensor::from_f16(&[h, k], &w1).unwrap())
        .unwrap();
    let b1t = g
        .weight("b1", HostTensor::from_f32(&[h], &b1).unwrap())
        .unwrap();
    let a = g.linear(x, w1t, Some(b1t), Activation::Gelu).unwrap();
    let t = g.transpose(a, 0, 1).unwrap();
    let t = g.reshape(t, &[2, h * m / 2]).unwrap();
    let c = g.cfg(t, 1.5, 0.0).unwrap();
    let c = g.reshape(c, &[m / 2, h]).unwrap();
    let c = g.add(c, b1t).unwrap();
    let c = g.reshape(c, &[h * m / 2]).unwrap();
    let half = g.slice(x, 0, 0, m / 2).unwrap();
    let half = g.reshape(half, &[m / 2 * k]).unwrap();
    let s = g.scale(c, 0.25).unwrap();
    let sl = g.slice(s, 0, 0, m / 2 * k).unwrap();
    let mixed = g.axpby(0.5, sl, 2.0, half).unwrap();
    let x0 = g.activation(mixed, Activation::Silu).unwrap();
    let y = g.ddim(mixed, x0, coef).unwrap();
    let z = g.mul(y, x0).unwrap();
    g.output(z);
    g.output(c);
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    let cexe = g.clone().compile(&cpu).unwrap();
    for b in backends() {
        let vexe = g.clone().compile(&b).unwrap();
        for run in 0..3 {
            let xv = r.vec(m * k, -2.0, 2.0);
            let cv = [1.2f32, 0.5 + run as f32 * 0.1, 0.9, 0.3];
            for e in [&cexe as &dyn Run, &vexe] {
                e.inputs(x, coef, &xv, &cv);
            }
            let (want_z, want_c) = (cexe.read_f32(z).unwrap(), cexe.read_f32(c).unwrap());
            let (got_z, got_c) = (vexe.read_f32(z).unwrap(), vexe.read_f32(c).unwrap());
            assert_close(&format!("graph run {run} c"), &got_c, &want_c, 1e-5, 2e-6);
            assert_close(&format!("graph run {run} z"), &got_z, &want_z, 1e-4, 1e-5);
        }
    }
}

/// Writing inputs and running, for executables of either backend.
trait Run {
    fn inputs(
        &self,
        x: kinema::graph::TensorId,
        coef: kinema::graph::TensorId,
        xv: &[f32],
        cv: &[f32],
    );
}

impl<B: Backend> Run for kinema::graph::Executable<'_, B> {
    fn inputs(
        &self,
        x: kinema::graph::TensorId,
        coef: kinema::graph::TensorId,
        xv: &[f32],
        cv: &[f32],
    ) {
        self.write_f32(x, xv).unwrap();
        self.write_f32(coef, cv).unwrap();
        self.run().unwrap();
    }
}

/// The strict GEMM at shapes that select each of its tiles on the device (the tile grows with
/// the output: see `gemm_tile` in src/vulkan/kernels.rs), with m, n and k off every tile
/// multiple, f32 and f16 weights, and batched_matmul with both layouts of b.
#[test]
fn strict_gemm_tiles_and_edges() {
    let mut r = Rng(31);
    for b in backends() {
        for (m, n, k) in [
            (2100, 2060, 11),
            (1100, 1030, 19),
            (700, 1000, 13),
            (5, 77, 9),
        ] {
            let x = r.vec(m * k, -1.0, 1.0);
            let w = r.vec(n * k, -1.0, 1.0);
            let w16: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let w16f: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
            let p = LinearParams {
                m,
                n,
                k,
                activation: Activation::None,
            };
            let xb = upload_f32(&b, &x);
            for (dt, bytes, wf) in [
                (DType::F32, bytemuck::cast_slice(&w).to_vec(), &w),
                (DType::F16, bytemuck::cast_slice(&w16).to_vec(), &w16f),
            ] {
                let wb = upload(&b, dt, &bytes, n * k);
                let y = alloc(&b, DType::F32, m * n);
                let mut rec = b.begin().unwrap();
                b.linear(&mut rec, &p, &xb, &wb, None, &y).unwrap();
                b.submit(&rec).unwrap();
                let want = gemm_f64(&x, wf, (m, n, k), true);
                let what = format!("linear {m}x{n}x{k} {dt}");
                assert_gemm(&what, &download_f32(&b, &y), &want, strict_gemm_rel(k), 0.0);
            }
            if m > 1000 {
                continue;
            }
            for trans_b in [false, true] {
                let batch = 2;
                let a = r.vec(batch * m * k, -1.0, 1.0);
                let bv = r.vec(batch * n * k, -1.0, 1.0);
                let p = BatchedMatmulParams {
                    batch,
                    m,
                    n,
                    k,
                    trans_b,
                    alpha: 1.0,
                    a_batch_stride: m * k,
                    b_batch_stride: n * k,
                };
                let c = alloc(&b, DType::F32, batch * m * n);
                let mut rec = b.begin().unwrap();
                let (ab, bb) = (upload_f32(&b, &a), upload_f32(&b, &bv));
                b.batched_matmul(&mut rec, &p, &ab, &bb, &c).unwrap();
                b.submit(&rec).unwrap();
                let got = download_f32(&b, &c);
                for z in 0..batch {
                    let want = gemm_f64(
                        &a[z * m * k..][..m * k],
                        &bv[z * n * k..][..n * k],
                        (m, n, k),
                        trans_b,
                    );
                    assert_gemm(
                        &format!("batched_matmul {m}x{n}x{k} trans_b {trans_b} batch {z}"),
                        &got[z * m * n..][..m * n],
                        &want,
                        strict_gemm_rel(k),
                        0.0,
                    );
                }
            }
        }
    }
}

/// The skinny linear kernel (`linear_skinny.comp`, picked for m <= 64 in strict mode) against
/// the CPU scalar reference, and its f32 GEMM part within the strict bound of the f64
/// reference: m across its row blocks (1, 2, 7, 16 rows a block; 33 and 64 walk 3 and 4
/// blocks) and just past the threshold (65: the tiled GEMM), odd n, k off multiples of 4
/// (the scalar loads) and on them (vector loads; q8_0 needs whole blocks), x at an unaligned
/// offset (scalar loads again), every weight dtype, bias on and off, every activation. Then,
/// under a 4 KiB binding limit, weights split over groups of columns: each dispatch writes
/// fewer columns than the ldy = n between rows of y.
#[test]
fn skinny_linear_matches_the_reference() {
    let mut r = Rng(41);
    let acts = [
        Activation::None,
        Activation::Relu,
        Activation::LeakyRelu(0.01),
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
    ];
    for small_binding in [false, true] {
        for mut o in devices() {
            if small_binding {
                o.max_binding = Some(4096);
            }
            let b = VulkanBackend::with_options(o).unwrap();
            let shapes: &[(usize, usize, usize)] = if small_binding {
                &[(1, 61, 37), (2, 61, 64), (7, 61, 37), (7, 77, 64)]
            } else {
                &[
                    (1, 61, 37),
                    (2, 33, 100),
                    (7, 61, 64),
                    (16, 45, 37),
                    (33, 61, 96),
                    (64, 29, 37),
                    (64, 61, 160),
                    (65, 61, 64),
                ]
            };
            for (si, &(m, n, k)) in shapes.iter().enumerate() {
                let x = r.vec(m * k + 1, -1.0, 1.0);
                let wf = r.vec(n * k, -1.0, 1.0);
                let bias = r.vec(n, -1.0, 1.0);
                let xb = upload_f32(&b, &x);
                // Even shapes read x from element 1 (unaligned), odd ones from 0.
                let x0 = (si + 1) % 2;
                let xs = &x[x0..][..m * k];
                let xr = xb.slice(x0, m * k).unwrap();
                let bb = upload_f32(&b, &bias);
                for (di, case) in weight_dtypes(&wf, k).iter().enumerate() {
                    let (dt, bytes) = (case.0, &case.1);
                    let wref = reference_weights(&wf, case);
                    let wbuf = upload(&b, dt, bytes, n * k);
                    for (ai, &act) in acts.iter().enumerate() {
                        let with_bias = (ai + di + si) % 2 == 0;
                        let p = LinearParams {
                            m,
                            n,
                            k,
                            activation: act,
                        };
                        let bias_ref = with_bias.then_some(&bias[..]);
                        let mut want = vec![0f32; m * n];
                        cpu::matmul::reference::linear(&p, xs, wref, bias_ref, &mut want);
                        let y = alloc(&b, DType::F32, m * n);
                        let mut rec = b.begin().unwrap();
                        let bias_buf = with_bias.then_some(&bb);
                        b.linear(&mut rec, &p, &xr, &wbuf, bias_buf, &y).unwrap();
                        if small_binding {
                            assert!(rec.dispatches() > 1, "{m}x{n}x{k} {dt}: one dispatch");
                        }
                        b.submit(&rec).unwrap();
                        let got = download_f32(&b, &y);
                        let what = format!(
                            "skinny linear {m}x{n}x{k} {dt} {act:?} bias {with_bias} x at {x0} \
                             binding limit {small_binding}"
                        );
                        assert_close(&what, &got, &want, 2e-6 * k as f32, 2e-6);
                        if dt == DType::F32 && act == Activation::None && !with_bias {
                            let exact = gemm_f64(xs, &wf, (m, n, k), true);
                            assert_gemm(&what, &got, &exact, strict_gemm_rel(k), 0.0);
                        }
                    }
                }
            }
        }
    }
}

/// Whether two results are the same bits, element for element.
fn bit_identical(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Fast-mode linear on cooperative matrices against the f64 reference, within the f16 input
/// rounding bound, for f32/f16/bf16/q8_0 weights, k a multiple of 4 or not (vector or
/// element loads), m, n, k off the tile multiples, with a bias, and with ReLU for f16
/// weights (the epilogue). Both matrix-core paths run where the device has them: the
/// workgroup-scope `VK_NV_cooperative_matrix2` kernel (f32 and f16 weights at 1101 x 2060,
/// x cast to f16 first) and the subgroup-scope kernels (`coopmat2` off). On a device without cooperative matrices
/// (lavapipe) fast mode must run the strict kernel: its result is checked to be the strict
/// backend's bit for bit, with a notice that the cooperative-matrix path was not tested.
/// `x w^T + bias` (ReLU'd when `relu`) on `b`, with weights of dtype `dt` given as `bytes`.
#[allow(clippy::too_many_arguments)]
fn run_linear(
    b: &VulkanBackend,
    (m, n, k): (usize, usize, usize),
    x: &[f32],
    dt: DType,
    bytes: &[u8],
    bias: &[f32],
    relu: bool,
) -> Vec<f32> {
    let p = LinearParams {
        m,
        n,
        k,
        activation: if relu {
            Activation::Relu
        } else {
            Activation::None
        },
    };
    let (xb, wbuf) = (upload_f32(b, x), upload(b, dt, bytes, n * k));
    let bb = upload_f32(b, bias);
    let y = alloc(b, DType::F32, m * n);
    let mut rec = b.begin().unwrap();
    b.linear(&mut rec, &p, &xb, &wbuf, Some(&bb), &y).unwrap();
    b.submit(&rec).unwrap();
    download_f32(b, &y)
}

/// The f64 reference of [`run_linear`] and `sum |x_i w_i| + |bias|` per output ([`gemm_f64`]
/// with the bias added exactly; ReLU is 1-Lipschitz, so a bound on the pre-activation value
/// still holds after it).
fn linear_f64(
    x: &[f32],
    wf: &[f32],
    bias: &[f32],
    (m, n, k): (usize, usize, usize),
    relu: bool,
) -> [Vec<f64>; 2] {
    let [mut want, mut scale] = gemm_f64(x, wf, (m, n, k), true);
    for (i, (w, s)) in want.iter_mut().zip(scale.iter_mut()).enumerate() {
        let b = f64::from(bias[i % n]);
        *w += b;
        *s += b.abs();
        if relu {
            *w = w.max(0.0);
        }
    }
    [want, scale]
}

#[test]
fn coopmat_linear_within_f16_rounding() {
    let mut r = Rng(37);
    for (o, coopmat2) in devices()
        .into_iter()
        .flat_map(|o| [(o.clone(), true), (o, false)])
    {
        let mut fast_o = o.clone();
        fast_o.precision = Precision::Fast.into();
        fast_o.coopmat2 = coopmat2;
        let fast = VulkanBackend::with_options(fast_o).unwrap();
        let strict = VulkanBackend::with_options(o).unwrap();
        eprintln!(
            "fast linear on {} (coopmat2 allowed: {coopmat2}): {:?}",
            fast.device_name(),
            fast.cooperative_matrix()
        );
        assert_eq!(fast.info().precision, Precision::Fast);
        let coop = fast.info().cooperative_matrix;
        if !coop {
            eprintln!(
                "NOTICE: {} has no cooperative matrix: the cooperative-matrix GEMM is not \
                 tested here (run this test on a GPU that has VK_KHR_cooperative_matrix); \
                 checking that fast mode falls back to the strict kernel instead",
                fast.device_name()
            );
        }
        // 1101 x 2060 is large enough for the workgroup-scope kernel (f32 and f16 weights), whose
        // x cast to f16 has an odd element count here.
        let shapes = [
            (606, 384, 1024),
            (1101, 2060, 71),
            (130, 70, 40),
            (33, 17, 30),
            (1, 5, 64),
        ];
        for (m, n, k) in shapes {
            let x = r.vec(m * k, -1.0, 1.0);
            let w = r.vec(n * k, -1.0, 1.0);
            let w16: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let wb: Vec<half::bf16> = w.iter().map(|&v| half::bf16::from_f32(v)).collect();
            let mut cases = vec![
                (DType::F32, bytemuck::cast_slice(&w).to_vec(), w.clone()),
                (
                    DType::F16,
                    bytemuck::cast_slice(&w16).to_vec(),
                    w16.iter().map(|v| v.to_f32()).collect::<Vec<f32>>(),
                ),
                (
                    DType::BF16,
                    bytemuck::cast_slice(&wb).to_vec(),
                    wb.iter().map(|v| v.to_f32()).collect(),
                ),
            ];
            if k % 32 == 0 {
                let mut wq = vec![0u8; n * k / 32 * Q8_0_BLOCK_BYTES];
                for (blk, out) in w.chunks(32).zip(wq.chunks_mut(Q8_0_BLOCK_BYTES)) {
                    q8_0_quantize_block(blk, out);
                }
                let mut wqf = vec![0f32; n * k];
                Weights::Q8_0(&wq).widen_into(0, &mut wqf);
                cases.push((DType::Q8_0, wq, wqf));
            }
            let bias = r.vec(n, -1.0, 1.0);
            for (dt, bytes, wf) in cases {
                let relu = dt == DType::F16;
                let run = |b: &VulkanBackend| run_linear(b, (m, n, k), &x, dt, &bytes, &bias, relu);
                let got = run(&fast);
                let what = format!(
                    "fast linear {m}x{n}x{k} {dt} relu {relu} coopmat2 {coopmat2} on {}",
                    fast.device_name()
                );
                if coop {
                    // The bias adds exactly here and with one rounding there.
                    let want = linear_f64(&x, &wf, &bias, (m, n, k), relu);
                    let rel = COOPMAT_F16_INPUT_REL + strict_gemm_rel(k);
                    let abs = k as f64 * COOPMAT_F16_SUBNORMAL_ABS;
                    assert_gemm(&what, &got, &want, rel, abs);
                } else {
                    assert!(
                        bit_identical(&got, &run(&strict)),
                        "{what}: fast mode without cooperative matrices must be strict"
                    );
                }
            }
        }
    }
}

/// Split precision's linears: on a device with workgroup-scope cooperative matrices, each
/// output within [`SPLIT_INPUT_REL`] plus the f32 sums' error of the f64 reference, and the
/// relative L2 error at k >= 1024 within 8 times the strict kernel's on the same data (measured
/// 2.3-4.5 times on the H200; fast mode's is ~250 times), so a kernel that lost the low parts
/// fails. Elsewhere split resolves to strict and must run the strict kernels bit for bit.
#[test]
fn split_linear_within_its_bound() {
    let mut r = Rng(41);
    for o in devices() {
        let mut split_o = o.clone();
        split_o.precision = kinema::precision::PrecisionChoice::Split;
        let split = VulkanBackend::with_options(split_o).unwrap();
        let strict = VulkanBackend::with_options(o).unwrap();
        let on = split.info().precision == Precision::Split;
        if !on {
            assert_eq!(split.info().precision, Precision::Strict);
            eprintln!(
                "NOTICE: {} has no workgroup-scope cooperative matrices: split precision \
                 resolved to strict, and the split kernel is not tested here (run this test on \
                 a GPU with VK_NV_cooperative_matrix2); checking the strict fallback instead",
                split.device_name()
            );
        }
        // The tiles: 64 x 128 (1101 x 2060: 594 tiles of 64 x 64), 64 x 64 (the rest); k not a
        // multiple of the k step (71, 40); few rows (32: strict's streaming kernel).
        let shapes = [
            (404, 1024, 2048, DType::F32),
            (300, 768, 1024, DType::F16),
            (1101, 2060, 71, DType::F32),
            (520, 2100, 64, DType::F16),
            (130, 70, 40, DType::F32),
            (32, 512, 256, DType::F32),
        ];
        for (m, n, k, dt) in shapes {
            let x = r.vec(m * k, -1.0, 1.0);
            let w = r.vec(n * k, -1.0, 1.0);
            let w16: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let (bytes, wf) = match dt {
                DType::F16 => (
                    bytemuck::cast_slice(&w16).to_vec(),
                    w16.iter().map(|v| v.to_f32()).collect::<Vec<f32>>(),
                ),
                _ => (bytemuck::cast_slice(&w).to_vec(), w.clone()),
            };
            let bias = r.vec(n, -1.0, 1.0);
            let relu = dt == DType::F16;
            let run = |b: &VulkanBackend| run_linear(b, (m, n, k), &x, dt, &bytes, &bias, relu);
            let (got, exact) = (run(&split), run(&strict));
            let what = format!("split linear {m}x{n}x{k} {dt} on {}", split.device_name());
            if !on {
                assert!(bit_identical(&got, &exact), "{what}: must be strict");
                continue;
            }
            let [want, scale] = linear_f64(&x, &wf, &bias, (m, n, k), relu);
            let rel_l2 = |y: &[f32]| {
                let (mut e, mut t) = (0f64, 0f64);
                for (g, w) in y.iter().zip(&want) {
                    e += (f64::from(*g) - w).powi(2);
                    t += w * w;
                }
                (e / t).sqrt()
            };
            let (e_split, e_strict) = (rel_l2(&got), rel_l2(&exact));
            eprintln!("{what}: rel L2 {e_split:.2e}, strict kernel {e_strict:.2e}");
            if k >= 1024 {
                assert!(
                    e_split <= 8.0 * e_strict,
                    "{what}: relative L2 error {e_split:e} > 8 x the strict kernel's {e_strict:e}"
                );
            }
            // The bias adds with one more rounding; ReLU is 1-Lipschitz.
            let rel = SPLIT_INPUT_REL + strict_gemm_rel(k + 1) * (1.0 + 1.0 / 1024.0);
            let abs = k as f64 * COOPMAT_F16_SUBNORMAL_ABS;
            assert_gemm(&what, &got, &[want, scale], rel, abs);
        }
    }
}

/// Fast mode's row reductions: strict mode never uses subgroup arithmetic; fast mode does on a
/// device that has it (lavapipe and NVIDIA both do), and its layer norm and softmax stay within
/// f32 rounding of the strict kernels (only the order of the sums differs).
#[test]
fn fast_rows_use_subgroup_reductions() {
    for o in devices() {
        let strict = VulkanBackend::with_options(o.clone()).unwrap();
        assert!(!strict.subgroup_reductions());
        let mut f = o.clone();
        f.precision = Precision::Fast.into();
        let fast = VulkanBackend::with_options(f).unwrap();
        if !fast.subgroup_reductions() {
            eprintln!("NOTICE: {} has no subgroup arithmetic", fast.device_name());
            continue;
        }
        let (rows, cols) = (37, 1000);
        let mut r = Rng(5);
        let xs = r.vec(rows * cols, -3.0, 3.0);
        let run = |b: &VulkanBackend, softmax: bool| -> Vec<f32> {
            let x = upload_f32(b, &xs);
            let y = alloc(b, DType::F32, rows * cols);
            let mut rec = b.begin().unwrap();
            if softmax {
                let p = SoftmaxParams {
                    rows,
                    cols,
                    scale: 0.7,
                };
                b.softmax(&mut rec, &p, &x, &y).unwrap();
            } else {
                let p = NormParams {
                    rows,
                    cols,
                    eps: 1e-5,
                };
                b.layer_norm(&mut rec, &p, &x, None, None, &y).unwrap();
            }
            b.submit(&rec).unwrap();
            download_f32(b, &y)
        };
        for softmax in [false, true] {
            let (a, b) = (run(&strict, softmax), run(&fast, softmax));
            let worst = a
                .iter()
                .zip(&b)
                .map(|(p, q)| (p - q).abs() / p.abs().max(1e-3))
                .fold(0f32, f32::max);
            // Sums of 1000 terms in another order: a few hundred ulp at most.
            assert!(
                worst < 1e-4,
                "softmax {softmax}: relative difference {worst}"
            );
        }
    }
}

/// Rounding of each f16 operand of the fast attention (q * scale, k, v and every probability
/// p, `kernels/glsl/attention_cm.comp`): at most 2^-11 of the value in f16's normal range
/// (2^-10 allowed, should a device not round to nearest, as for `COOPMAT_F16_INPUT_REL`).
const ATTENTION_F16_ROUND: f64 = 1.0 / 1024.0;

/// The f64 reference of attention (per output `[batch, q_len, q_heads, head_dim]`) and the
/// bound on the fast attention's error there. `u_in` is [`ATTENTION_F16_ROUND`], or 0 when
/// every q * scale, k and v is an f16 number (rounding them is then exact); `p_round` is
/// [`ATTENTION_F16_ROUND`] (each p's rounding). Split precision carries every operand (p too)
/// within 2^-20 of itself and drops a low x low term: `u_in` half and `p_round` all of
/// [`SPLIT_INPUT_REL`] cover it. With
/// u = 2^-24 (f32) and, for one query row, A = max_j |scale| sum_t |q_t k_jt| and
/// S = max_j |s_j| over the keys it sees:
///
/// 1. Scores. q * scale (an f32 product, then f16) and k are off by (1 + u_in)^2 (1 + u) - 1
///    of themselves, f16 subnormals (below 2^-14) by 2^-24 absolute (2^-25 when rounded to
///    nearest), and the matrix unit's f32 sum of HD exact f16 products adds (HD + 1) u A, so
///    every score is within D = ((1 + u_in)^2 (1 + u) - 1 + (HD + 1) u) A
///    + 2^-24 max_j sum_t (|q_t scale| + |k_jt|) of its exact value.
/// 2. Softmax. Scores each off by at most D move every weight e^s_j / sum_i e^s_i by a factor
///    within e^(+-2D).
/// 3. Probabilities. Each p = exp(s - m) (m the row's reference maximum, x = s - m within
///    2 (S + D) + 8 of 0 since p <= e^8) carries the built-in exp's (3 + 2|x|) ulp
///    (Vulkan's bound; an ulp is at most 2^-23 of the value) and its f16 rounding, a of
///    itself in all; l sums the same rounded p, so each normalised weight p / l is off by
///    at most 2a / (1 - a) of itself. A p below 2^-14 is off by 2^-24 absolute instead, and
///    l >= 1 (the row maximum's own p), so the weights move by kv_len 2^-24 at most in all.
/// 4. Values. v is rounded to f16 (u_in of itself, 2^-24 absolute below 2^-14), and
///    sum_j p_j v_j is summed in f32 by the matrix unit over kv_len terms ((kv_len + 1) u
///    of sum_j p_j |v_j|); the rescales (one product per tile at most), l's sum, 1 / l and
///    the product by it add fewer than kv_len + 7 roundings: (2 kv_len + 8) u in all.
///
/// So |out - o| <= ((e^(2D) (1 + 2a / (1 - a))) (1 + u_in) (1 + (2 kv_len + 8) u) - 1)
/// sum_j w_j |v_j| + (kv_len + 1) 2^-24 max(1, max |v|), with w the exact weights. A query
/// that sees no key must be exactly 0.
fn attention_f64_bound(
    p: &AttentionParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[u32]>,
    u_in: f64,
    p_round: f64,
) -> [Vec<f64>; 2] {
    let u = 2f64.powi(-24);
    let d = p.head_dim;
    let group = p.q_heads / p.kv_heads;
    let n = p.batch * p.q_len * p.q_heads * d;
    let (mut want, mut bound) = (vec![0f64; n], vec![0f64; n]);
    let vmax = v.iter().fold(1f64, |m, &x| m.max((x as f64).abs()));
    for b in 0..p.batch {
        for i in 0..p.q_len {
            for h in 0..p.q_heads {
                let kh = h / group;
                let qrow = &q[(b * p.q_len + i) * p.q_row_stride + h * d..][..d];
                let (mut s, mut seen) = (Vec::new(), Vec::new());
                let (mut a_max, mut s_max, mut sub_max) = (0f64, 0f64, 0f64);
                for j in 0..p.kv_len {
                    let visible = match p.mask {
                        MaskKind::None => true,
                        MaskKind::KeyPadding => mask.unwrap()[b * p.kv_len + j] != 0,
                        MaskKind::Causal => j + p.q_len <= i + p.kv_len,
                    };
                    if !visible {
                        continue;
                    }
                    let krow = &k[(b * p.kv_len + j) * p.kv_row_stride + kh * d..][..d];
                    let (mut dot, mut abs, mut sub) = (0f64, 0f64, 0f64);
                    for (&x, &y) in qrow.iter().zip(krow) {
                        let xs = x as f64 * p.scale as f64;
                        dot += xs * y as f64;
                        abs += (xs * y as f64).abs();
                        sub += xs.abs() + (y as f64).abs();
                    }
                    s.push(dot);
                    seen.push(j);
                    a_max = a_max.max(abs);
                    s_max = s_max.max(dot.abs());
                    sub_max = sub_max.max(sub);
                }
                if seen.is_empty() {
                    continue;
                }
                let m = s.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                let e: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                let dd = ((1.0 + u_in).powi(2) * (1.0 + u) - 1.0 + (d + 1) as f64 * u) * a_max
                    + 2f64.powi(-24) * sub_max;
                let x = 2.0 * (s_max + dd) + 8.0;
                let a = p_round + (3.0 + 2.0 * x) * 2f64.powi(-23);
                let rel = (2.0 * dd).exp()
                    * (1.0 + 2.0 * a / (1.0 - a))
                    * (1.0 + u_in)
                    * (1.0 + (2 * p.kv_len + 8) as f64 * u)
                    - 1.0;
                let abs = (p.kv_len + 1) as f64 * 2f64.powi(-24) * vmax;
                let o = (b * p.q_len + i) * p.q_heads * d + h * d;
                for t in 0..d {
                    let (mut acc, mut mag) = (0f64, 0f64);
                    for (&j, &ej) in seen.iter().zip(&e) {
                        let vj = v[(b * p.kv_len + j) * p.kv_row_stride + kh * d + t] as f64;
                        acc += ej * vj;
                        mag += ej * vj.abs();
                    }
                    want[o + t] = acc / z;
                    bound[o + t] = rel * mag / z + abs;
                }
            }
        }
    }
    [want, bound]
}

/// Fast-mode attention on cooperative matrices against the f64 reference, within the f16
/// rounding bound of [`attention_f64_bound`]: head_dim 128 (and 64, which only the
/// workgroup-scope kernel takes: MotionBricks' pose transformer; 32, its root transformer's,
/// runs the strict shader in fast mode), query and key counts off the tile multiples (1, 7, 202, 254), GQA groups of 1, 2 and 4, every mask kind (key padding
/// with a batch whose keys are all hidden, causal with more queries than keys so whole query
/// blocks see nothing), batches > 1, operands as column slices of a fused QKV buffer (the
/// vector loads) or with odd offsets and strides (the element loads), shapes that select each
/// variant, and scores growing along the keys by more than the shader's rescaling threshold
/// per tile (exact f16 inputs, so the bound is tight there). Where the device has
/// workgroup-scope matrices with reductions (the H200), the workgroup-scope kernel runs, and
/// the subgroup-scope variants are tested too on a backend with `coopmat2` off. On a device
/// where no fast kernel runs (lavapipe) fast mode must run the strict shader: its result is
/// checked to be the strict backend's bit for bit, with a notice that the fast kernel was not
/// tested. Where split precision exists (workgroup-scope matrices with reductions), its
/// attention runs every case too, within the bound with split precision's operand errors.
#[test]
fn fast_attention_within_f16_rounding() {
    #[derive(Clone, Copy, PartialEq)]
    enum Data {
        /// Uniform in [-1, 1), q, k and v columns of one fused buffer.
        Fused,
        /// Uniform in [-1, 1), separate buffers at odd offsets with odd row strides.
        Odd,
        /// Multiples of 1/16 in [-1, 1] (exact in f16), scale 1/8, with dimension 0 of q
        /// 4, -4, 1/4 or 0 by row and of key j equal to j: scores rise by up to 16 per tile
        /// of 32 keys, so rows are rescaled.
        Growing,
    }
    let mut r = Rng(41);
    use MaskKind::*;
    let cases = [
        (3, 202, 202, 8, 8, None, Data::Fused, 128),
        (3, 202, 202, 8, 8, KeyPadding, Data::Fused, 128),
        (2, 254, 254, 8, 4, Causal, Data::Fused, 128),
        (2, 7, 254, 4, 1, Causal, Data::Fused, 128),
        (2, 254, 7, 2, 2, Causal, Data::Odd, 128),
        (2, 1, 1, 2, 1, None, Data::Fused, 128),
        (1, 1, 254, 4, 2, KeyPadding, Data::Odd, 128),
        (2, 202, 7, 2, 1, KeyPadding, Data::Fused, 128),
        (3, 202, 202, 8, 8, None, Data::Growing, 128),
        (2, 254, 254, 2, 1, Causal, Data::Growing, 128),
        (1, 70, 254, 2, 2, KeyPadding, Data::Growing, 128),
        (3, 202, 202, 8, 8, KeyPadding, Data::Fused, 64),
        (2, 70, 254, 4, 2, Causal, Data::Odd, 64),
        (2, 33, 33, 16, 16, KeyPadding, Data::Fused, 32),
    ];
    for o in devices() {
        let mut fast_o = o.clone();
        fast_o.precision = Precision::Fast.into();
        let strict = VulkanBackend::with_options(o).unwrap();
        let fast = VulkanBackend::with_options(fast_o.clone()).unwrap();
        // What the kernels need (kernels/attention_cm.rs): the H200 has both.
        let coop = fast.cooperative_matrix().unwrap_or_default();
        let capable = fast.subgroup_size() == 32 && coop.starts_with("16x16x16 ");
        let cm2 = coop.ends_with("with reductions");
        let mut split_o = fast_o.clone();
        split_o.precision = kinema::precision::PrecisionChoice::Split;
        // (backend, workgroup-scope matrices, split precision)
        let mut fasts = vec![(fast, cm2, false)];
        if cm2 {
            fast_o.coopmat2 = false;
            fasts.push((VulkanBackend::with_options(fast_o).unwrap(), false, false));
            let split = VulkanBackend::with_options(split_o).unwrap();
            assert_eq!(split.info().precision, Precision::Split);
            fasts.push((split, true, true));
        }
        for (fast, cm2, split) in &fasts {
            for &(batch, ql, kl, qh, kh, mask, data, d) in &cases {
                let (q_stride, kv_stride, q_at, k_at, v_at) = match data {
                    Data::Odd => (qh * d + 3, kh * d + 1, 1, 5, 2),
                    _ => {
                        let w = (qh + 2 * kh) * d;
                        (w, w, 0, qh * d, (qh + kh) * d)
                    }
                };
                let exact = |r: &mut Rng| (r.below(33) as f32 - 16.0) / 16.0;
                let mut fill = |n: usize| -> Vec<f32> {
                    match data {
                        Data::Growing => (0..n).map(|_| exact(&mut r)).collect(),
                        _ => r.vec(n, -1.0, 1.0),
                    }
                };
                // Whole buffers; the operands start at q_at, k_at and v_at.
                let (mut qbuf, mut kbuf, mut vbuf) = if data == Data::Odd {
                    (
                        fill(q_at + batch * ql * q_stride),
                        fill(k_at + batch * kl * kv_stride),
                        fill(v_at + batch * kl * kv_stride),
                    )
                } else {
                    let fused = fill(batch * kl * kv_stride);
                    (fill(batch * ql * q_stride), fused.clone(), fused)
                };
                let scale = if data == Data::Growing {
                    for t in 0..batch * ql {
                        for h in 0..qh {
                            qbuf[q_at + t * q_stride + h * d] = [4.0, -4.0, 0.25, 0.0][t % ql % 4];
                        }
                    }
                    for t in 0..batch * kl {
                        for h in 0..kh {
                            kbuf[k_at + t * kv_stride + h * d] = (t % kl) as f32;
                        }
                    }
                    // k and v share the fused buffer.
                    vbuf = kbuf.clone();
                    0.125
                } else {
                    1.0 / (d as f32).sqrt()
                };
                // Every third key hidden, and all keys of batch 2 (its queries output zeros).
                let m: Vec<u32> = (0..batch * kl)
                    .map(|i| u32::from(i % 3 != 1 && i / kl != 2))
                    .collect();
                let p = AttentionParams {
                    batch,
                    q_len: ql,
                    kv_len: kl,
                    q_heads: qh,
                    kv_heads: kh,
                    head_dim: d,
                    scale,
                    mask,
                    q_row_stride: q_stride,
                    kv_row_stride: kv_stride,
                };
                let what = format!(
                    "{} attention {batch}x{ql}x{kl} heads {qh}/{kh} {mask:?} d {d} on {}",
                    if *split { "split" } else { "fast" },
                    fast.device_name()
                );
                let run = |b: &VulkanBackend| {
                    let qb = upload_f32(b, &qbuf);
                    let (kb, vb) = if data == Data::Odd {
                        (upload_f32(b, &kbuf), upload_f32(b, &vbuf))
                    } else {
                        let kv = upload_f32(b, &kbuf);
                        (kv.clone(), kv)
                    };
                    let qs = qb.slice(q_at, qb.len - q_at).unwrap();
                    let ks = kb.slice(k_at, kb.len - k_at).unwrap();
                    let vs = vb.slice(v_at, vb.len - v_at).unwrap();
                    let mb = upload_u32(b, &m);
                    let out = alloc(b, DType::F32, batch * ql * qh * d);
                    let mref = (mask == KeyPadding).then_some(&mb);
                    let mut rec = b.begin().unwrap();
                    b.attention(&mut rec, &p, &qs, &ks, &vs, mref, &out)
                        .unwrap();
                    b.submit(&rec).unwrap();
                    download_f32(b, &out)
                };
                let got = run(fast);
                // Split precision takes head dimension 32 too.
                let expect = if *split || (*cm2 && d != 32) {
                    Some("attention_cm2")
                } else if capable && d == 128 {
                    Some("attention_cm_")
                } else {
                    Option::None
                };
                let shader = fast.fast_attention_shader(&p);
                assert_eq!(
                    shader.map(|s| s.starts_with(expect.unwrap_or("-"))),
                    expect.map(|_| true),
                    "{what}: chose {shader:?}, expected {expect:?}"
                );
                let Some(shader) = shader else {
                    assert!(
                        bit_identical(&got, &run(&strict)),
                        "{what}: without a fast variant the strict shader runs"
                    );
                    continue;
                };
                let (u_in, p_round) = match (data, *split) {
                    (Data::Growing, false) => (0.0, ATTENTION_F16_ROUND),
                    (Data::Growing, true) => (0.0, SPLIT_INPUT_REL),
                    (_, false) => (ATTENTION_F16_ROUND, ATTENTION_F16_ROUND),
                    (_, true) => (SPLIT_INPUT_REL / 2.0, SPLIT_INPUT_REL),
                };
                let mk = (mask == KeyPadding).then_some(m.as_slice());
                let (qs, ks, vs) = (&qbuf[q_at..], &kbuf[k_at..], &vbuf[v_at..]);
                let [want, bound] = attention_f64_bound(&p, qs, ks, vs, mk, u_in, p_round);
                let mut worst = 0f64;
                for (idx, &g) in got.iter().enumerate() {
                    let e = (g as f64 - want[idx]).abs();
                    assert!(
                        e <= bound[idx],
                        "{what} ({shader}): output {idx} is {g}, reference {}, error {e:e} > \
                     bound {:e}",
                        want[idx],
                        bound[idx]
                    );
                    if bound[idx] > 0.0 {
                        worst = worst.max(e / bound[idx]);
                    }
                }
                eprintln!("{what} ({shader}): worst error {worst:.3} of the bound");
            }
        }
        if !capable {
            eprintln!(
                "NOTICE: {} cannot run the fast attention (it needs 32-invocation subgroups \
                 and the 16x16x16 f16 cooperative matrix): only the strict fallback was \
                 tested here",
                strict.device_name()
            );
        }
    }
}

/// `coopmat_peak` (the register-only cooperative-matrix loop behind `kinema bench --op
/// coopmat_peak`) runs exactly where the device has the 16 x 16 x 16 f16 shape and gives a
/// finite positive rate; elsewhere (lavapipe) it reports that there is nothing to measure.
#[test]
fn coopmat_peak_runs_where_the_shape_exists() {
    for o in devices() {
        let b = VulkanBackend::with_options(o).unwrap();
        let peak = b.coopmat_peak_gflops().unwrap();
        let shape = b
            .cooperative_matrix()
            .is_some_and(|d| d.starts_with("16x16x16 f16*f16+f32->f32"));
        assert_eq!(peak.is_some(), shape, "{}: {peak:?}", b.device_name());
        if let Some(g) = peak {
            assert!(g.is_finite() && g > 0.0, "{}: {g}", b.device_name());
            eprintln!(
                "{}: cooperative-matrix peak {g:.0} GFLOP/s",
                b.device_name()
            );
        }
    }
}

/// `read_peak` (the read-bandwidth probe behind `kinema bench --op read_peak`) runs on every
/// device in both patterns, reads whole 16-byte words (whole groups of 8 rows) within one
/// binding, gives a finite positive rate, and refuses rows it cannot walk.
#[test]
fn read_peak_runs_everywhere() {
    for o in devices() {
        let b = VulkanBackend::with_options(o).unwrap();
        for rows in [None, Some(8192), Some(64)] {
            let (bytes, g) = b.read_peak_gbps(rows).unwrap();
            let whole = rows.map_or(16, |r| 8 * r);
            assert!(
                bytes > 0 && bytes % whole == 0 && bytes <= 512 << 20,
                "{bytes}"
            );
            assert!(g.is_finite() && g > 0.0, "{}: {g}", b.device_name());
            eprintln!(
                "{}: {rows:?}: {bytes} bytes at {g:.1} GB/s",
                b.device_name()
            );
        }
        // Rows the shader cannot walk are refused, naming the problem.
        for bad in [0, 48, 100, 2 << 20] {
            let e = b.read_peak_gbps(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains("read_peak") && e.contains("multiple of 64"),
                "{e}"
            );
        }
    }
}

/// `KINEMA_VK_PIPELINE_STATS=1` prints each new pipeline's driver statistics exactly where the
/// device offers `VK_KHR_pipeline_executable_properties` (the H200 does, lavapipe does not), and
/// never stops a run. End to end in the command-line tool, so the variable reaches only it.
#[test]
fn pipeline_statistics_follow_the_extension() {
    let Ok(ds) = kinema::vulkan::probe() else {
        return;
    };
    for d in ds {
        let index = d.index.to_string();
        let out = bench_add_cli(&[
            ("KINEMA_VK_DEVICE", index.as_str()),
            ("KINEMA_VK_PIPELINE_STATS", "1"),
            ("KINEMA_VK_PIPELINE_CACHE", "off"),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {err}", d.name);
        let offered = d
            .extensions
            .iter()
            .any(|e| e == "VK_KHR_pipeline_executable_properties");
        let printed = err
            .lines()
            .any(|l| l.starts_with("kinema: pipeline binary (spec constants"));
        assert_eq!(printed, offered, "{}: {err}", d.name);
    }
}
