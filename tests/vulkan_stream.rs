//! The weight-streaming linear (`linear_stream.comp`, with `linear_stream_reduce.comp` for
//! split k) against the CPU scalar reference and the f64 bound, on every Vulkan device
//! (lavapipe in CI; `KINEMA_REQUIRE_VULKAN=1` fails when there is none). The kernel is forced
//! through the tuning variables (`KINEMA_VK_LINEAR=stream`, `KINEMA_VK_STREAM_SPLITS`,
//! `KINEMA_VK_STREAM_TILE`), which the backend reads when a linear is recorded; this binary
//! holds one test so that setting them races with nothing. The same test then runs conv1d on
//! the streaming kernel (`KINEMA_VK_CONV=stream`, `conv1d_stream`), and fast mode's streaming
//! linear on cooperative matrices (`linear_cm_stream_*`, and `linear_cm_direct_*` with the
//! weights loaded straight into the matrices; `KINEMA_VK_CM_STREAM`) where the device has them.

mod common;

use common::gemm::*;
use common::*;
use kinema::backend::{Backend, Precision};
use kinema::cpu;
use kinema::ops::*;
use kinema::tensor::DType;
use kinema::vulkan::{VulkanBackend, VulkanOptions};

/// Sets a tuning variable for the linears recorded next.
fn set(name: &str, value: Option<&str>) {
    // SAFETY: this test binary has one test, so no other thread reads or writes the
    // environment while it runs.
    unsafe {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
}

/// Every weight dtype, m in {1, 2, 7, 16, 32, 33, 64} (one and two row blocks of 32), odd n and
/// k (scalar weight and x loads) and k on multiples of 8 (vector loads; q8_0 needs whole
/// blocks), x at an unaligned offset for some shapes, bias on and off, activations; each shape
/// with one split of k (the epilogue in the main kernel), the automatic splits, and 3 forced
/// splits (partial sums and the reduce kernel), on the automatic tile (the narrow one: these
/// weights are under 2^22), a small forced tile (32 k staged at a time: many stages, 4 rows
/// per block) and the wide tiles LLM2Vec's shapes take (2 columns per invocation, 128 and 256 k
/// stages). Then, under a 4 KiB binding limit, weights split over
/// groups of columns (each dispatch writes fewer columns than the ldy = n between rows of y). Each result is checked against the CPU
/// scalar reference, f32 weights without activation also within the strict f64 bound, and
/// every result is bit-identical when recorded and run again (deterministic), when the same
/// recording runs a second time over a poisoned y, and with the splits summed by the separate
/// reduce dispatch (the default) and by each column group's last workgroup
/// (`KINEMA_VK_STREAM_FOLD=1`).
#[test]
fn stream_linear_matches_the_reference() {
    let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
    let devices = match kinema::vulkan::probe() {
        Ok(ds) => ds,
        Err(why) => {
            assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
            eprintln!("skipping: {why}");
            return;
        }
    };
    set("KINEMA_VK_LINEAR", Some("stream"));
    let acts = [Activation::None, Activation::Silu, Activation::Gelu];
    let shapes: &[(usize, usize, usize)] = &[
        (1, 61, 37),
        (2, 77, 320),
        (7, 61, 64),
        (16, 45, 37),
        (32, 130, 320),
        (33, 61, 96),
        (64, 29, 37),
        (64, 67, 256),
    ];
    // (splits, tile): one split, automatic, three, three on a small tile, and automatic on
    // the wide tile.
    let configs: &[(Option<&str>, Option<&str>)] = &[
        (Some("1"), None),
        (None, None),
        (Some("3"), None),
        (Some("3"), Some("64x4x4x4x32")),
        (None, Some("256x32x2x4x128")),
        // LLM2Vec's default tile on a device with 48 KiB of shared memory (the H200), which
        // it fills exactly; elsewhere it does not fit and the automatic tile runs.
        (Some("3"), Some("256x32x2x4x256")),
    ];
    let mut r = Rng(77);
    let small: &[(usize, usize, usize)] = &[(7, 61, 64), (2, 77, 320)];
    for (d, small_binding) in devices.iter().flat_map(|d| [(d, false), (d, true)]) {
        let mut o = VulkanOptions::new(Precision::Strict);
        o.device = Some(d.index);
        if small_binding {
            o.max_binding = Some(4096);
        }
        let b = VulkanBackend::with_options(o).unwrap();
        let shapes = if small_binding { small } else { shapes };
        for (si, &(m, n, k)) in shapes.iter().enumerate() {
            let x = r.vec(m * k + 1, -1.0, 1.0);
            let wf = r.vec(n * k, -1.0, 1.0);
            let bias = r.vec(n, -1.0, 1.0);
            let xb = upload_f32(&b, &x);
            let x0 = si % 2;
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
                    for &(splits, tile) in configs {
                        set("KINEMA_VK_STREAM_SPLITS", splits);
                        set("KINEMA_VK_STREAM_TILE", tile);
                        let run = || {
                            let y = alloc(&b, DType::F32, m * n);
                            let mut rec = b.begin().unwrap();
                            let bias_buf = with_bias.then_some(&bb);
                            b.linear(&mut rec, &p, &xr, &wbuf, bias_buf, &y).unwrap();
                            run_twice(&b, &rec, &y, m * n)
                        };
                        // The splits summed by each column group's last workgroup, and by the
                        // reduce dispatch (the default): the same bits, one more dispatch per
                        // group unfolded.
                        set("KINEMA_VK_STREAM_FOLD", Some("1"));
                        let (got, dispatches) = run();
                        set("KINEMA_VK_STREAM_FOLD", None);
                        let (unfolded, unfolded_dispatches) = run();
                        let what = format!(
                            "stream linear {m}x{n}x{k} {dt} {act:?} bias {with_bias} x at {x0} \
                             splits {splits:?} tile {tile:?} binding limit {small_binding} \
                             ({dispatches} dispatches, {unfolded_dispatches} unfolded)"
                        );
                        assert_same_bits(&what, &got, &unfolded);
                        // (Each group of columns over a binding may split k or not.)
                        assert!(
                            (dispatches..=2 * dispatches).contains(&unfolded_dispatches),
                            "{what}"
                        );
                        if small_binding && splits == Some("1") {
                            // One dispatch per group of columns.
                            assert!(dispatches >= 2, "{what}: weights not split over bindings");
                        } else if !small_binding && splits == Some("3") && k > 256 {
                            // k per split is a whole number of stages of at most 256 k (the
                            // H200 stages 256, lavapipe 128), so k > 256 splits at least
                            // twice on every device: one dispatch folded, two with the reduce.
                            assert_eq!(dispatches, 1, "{what}: the splits fold");
                            assert_eq!(unfolded_dispatches, 2, "{what}: split k takes a reduce");
                        }
                        if splits == Some("1") && !small_binding {
                            assert_eq!(dispatches, 1, "{what}: one split, one dispatch");
                        }
                        assert_close(&what, &got, &want, 2e-6 * k as f32, 2e-6);
                        if dt == DType::F32 && act == Activation::None && !with_bias {
                            let exact = gemm_f64(xs, &wf, (m, n, k), true);
                            assert_gemm(&what, &got, &exact, strict_gemm_rel(k), 0.0);
                        }
                        let (again, _) = run();
                        assert_same_bits(&format!("{what}: a second recording"), &got, &again);
                    }
                }
            }
        }
    }
    set("KINEMA_VK_LINEAR", None);
    conv_stream_matches_the_reference(&devices);
    cm_stream_linear_within_f16_rounding(&devices);
    cm_direct_linear_matches_the_staged_kernel(&devices);
    for v in [
        "KINEMA_VK_LINEAR",
        "KINEMA_VK_CM_STREAM",
        "KINEMA_VK_STREAM_FOLD",
        "KINEMA_VK_CONV",
        "KINEMA_VK_STREAM_SPLITS",
        "KINEMA_VK_STREAM_TILE",
    ] {
        set(v, None);
    }
}

/// conv1d on the streaming kernel (`KINEMA_VK_CONV=stream`: `conv1d_stream` and
/// `conv1d_stream_reduce`) for shapes of every kind, not only those the default window takes:
/// batches, kernel 1, 3 and 5, padding wider than the kernel's reach (taps wholly outside the
/// input), dilation, a reduction c_in kernel that is odd (scalar weight loads) or longer than
/// two stages, more output columns than one row block of 32, bias on and off; each with one
/// split, the automatic splits, three, and three on a small tile, at odd buffer offsets.
/// Checked against the CPU scalar reference, and bit-identical when run again, when the same
/// recording runs again over a poisoned y, and with the splits unfolded (the reduce dispatch).
fn conv_stream_matches_the_reference(devices: &[kinema::vulkan::DeviceSummary]) {
    set("KINEMA_VK_CONV", Some("stream"));
    let configs: &[(Option<&str>, Option<&str>)] = &[
        (Some("1"), None),
        (None, None),
        (Some("3"), None),
        (Some("3"), Some("64x4x4x4x32")),
    ];
    let shapes: &[(usize, usize, usize, usize, usize, usize, usize)] = &[
        (1, 3, 5, 7, 3, 1, 1),
        (2, 8, 4, 16, 3, 2, 2),
        (1, 16, 16, 5, 1, 0, 1),
        (3, 13, 29, 9, 3, 4, 4),
        (1, 100, 70, 12, 3, 1, 1),
        (2, 40, 33, 20, 5, 2, 1),
        (1, 24, 130, 40, 3, 9, 9),
    ];
    let mut r = Rng(78);
    for d in devices {
        let mut o = VulkanOptions::new(Precision::Strict);
        o.device = Some(d.index);
        let b = VulkanBackend::with_options(o).unwrap();
        for (si, &(batch, c_in, c_out, len, kernel, padding, dilation)) in shapes.iter().enumerate()
        {
            let p = Conv1dParams {
                batch,
                c_in,
                c_out,
                len,
                kernel,
                padding,
                dilation,
            };
            let red = c_in * kernel;
            let ol = p.out_len().unwrap();
            let x = r.vec(batch * c_in * len + 3, -1.0, 1.0);
            let w = r.vec(c_out * red + 1, -1.0, 1.0);
            let bias = r.vec(c_out, -1.0, 1.0);
            let with_bias = si % 2 == 0;
            let mut want = vec![0f32; batch * c_out * ol];
            let bias_ref = with_bias.then_some(&bias[..]);
            cpu::conv1d::reference::conv1d(&p, &x[3..], &w[1..], bias_ref, &mut want);
            let (xb, wb, bb) = (
                upload_f32(&b, &x),
                upload_f32(&b, &w),
                upload_f32(&b, &bias),
            );
            let xs = xb.slice(3, x.len() - 3).unwrap();
            let ws = wb.slice(1, w.len() - 1).unwrap();
            for &(splits, tile) in configs {
                set("KINEMA_VK_STREAM_SPLITS", splits);
                set("KINEMA_VK_STREAM_TILE", tile);
                let run = || {
                    let y = alloc(&b, DType::F32, want.len());
                    let mut rec = b.begin().unwrap();
                    b.conv1d(&mut rec, &p, &xs, &ws, with_bias.then_some(&bb), &y)
                        .unwrap();
                    run_twice(&b, &rec, &y, want.len())
                };
                set("KINEMA_VK_STREAM_FOLD", Some("1"));
                let (got, dispatches) = run();
                set("KINEMA_VK_STREAM_FOLD", None);
                let (unfolded, unfolded_dispatches) = run();
                let what = format!(
                    "stream conv1d {p:?} bias {with_bias} splits {splits:?} tile {tile:?} \
                     ({dispatches} dispatches, {unfolded_dispatches} unfolded)"
                );
                assert_same_bits(&what, &got, &unfolded);
                if splits == Some("1") {
                    assert_eq!(dispatches, 1, "{what}: one split, one dispatch");
                    assert_eq!(unfolded_dispatches, 1, "{what}: one split, one dispatch");
                } else if splits == Some("3") && red > 256 {
                    // As for the linear: more than one stage of at most 256 k.
                    assert_eq!(dispatches, 1, "{what}: the splits fold");
                    assert_eq!(unfolded_dispatches, 2, "{what}: split k takes a reduce");
                }
                assert_close(&what, &got, &want, 2e-6 * red as f32, 2e-6);
                let (again, _) = run();
                assert_same_bits(&format!("{what}: a second recording"), &got, &again);
            }
        }
    }
}

/// The fast-mode streaming variants, by module name (`gemm_policy::stream::CM_STREAM`).
const CM_STREAM: [&str; 3] = [
    "linear_cm_stream_32x128x32_32x32",
    "linear_cm_stream_32x64x64_32x16",
    "linear_cm_stream_32x128x32_32x16",
];

/// Fast mode's streaming linear on cooperative matrices (`linear_cm.comp` with `STREAM`),
/// each variant forced (`KINEMA_VK_CM_STREAM`) for every linear (`KINEMA_VK_LINEAR=stream`):
/// every weight dtype, one and two row blocks of 32 (m = 33, 64), odd n, k off the k step and
/// odd (element loads), x at an odd offset, bias on and off, activations; one split, the
/// automatic splits and 3. Checked against the f64 reference within the cooperative-matrix
/// bound (f16 operands, f32 sums), the recording shown to run that variant, and bit-identical
/// folded and unfolded and when run again. A device without cooperative matrices (lavapipe)
/// must run `linear_stream` instead, bit for bit strict mode's result.
fn cm_stream_linear_within_f16_rounding(devices: &[kinema::vulkan::DeviceSummary]) {
    set("KINEMA_VK_LINEAR", Some("stream"));
    let shapes: &[(usize, usize, usize)] = &[
        (32, 130, 320),
        (7, 61, 64),
        (33, 61, 96),
        (64, 67, 256),
        (16, 45, 37),
        (2, 200, 1000),
    ];
    let mut r = Rng(79);
    for d in devices {
        let mut o = VulkanOptions::new(Precision::Fast);
        o.device = Some(d.index);
        let fast = VulkanBackend::with_options(o).unwrap();
        let mut o = VulkanOptions::new(Precision::Strict);
        o.device = Some(d.index);
        let strict = VulkanBackend::with_options(o).unwrap();
        let coop = fast.info().cooperative_matrix;
        if !coop {
            eprintln!(
                "NOTICE: {} has no cooperative matrix: fast mode's streaming linear on them is \
                 not tested here; checking that it runs linear_stream instead",
                fast.device_name()
            );
        }
        for c in fast_cases(&mut r, shapes, 0) {
            let FastCase {
                m,
                n,
                k,
                dt,
                act,
                with_bias,
                x0,
                ..
            } = c;
            let run = |b: &VulkanBackend| c.run(b, 0);
            for variant in CM_STREAM {
                set("KINEMA_VK_CM_STREAM", Some(variant));
                for splits in [Some("1"), None, Some("3")] {
                    set("KINEMA_VK_STREAM_SPLITS", splits);
                    let what = format!(
                        "fast stream linear {m}x{n}x{k} {dt} {act:?} bias {with_bias} x at \
                             {x0} {variant} splits {splits:?} on {}",
                        fast.device_name()
                    );
                    set("KINEMA_VK_STREAM_FOLD", Some("1"));
                    let (got, shaders) = run(&fast);
                    set("KINEMA_VK_STREAM_FOLD", None);
                    let (unfolded, _) = run(&fast);
                    assert_same_bits(&what, &got, &unfolded);
                    let (again, _) = run(&fast);
                    assert_same_bits(&format!("{what}: run again"), &got, &again);
                    if !coop {
                        assert_eq!(shaders[0], "linear_stream", "{what}");
                        let (want, _) = run(&strict);
                        assert_same_bits(&format!("{what}: strict"), &got, &want);
                        continue;
                    }
                    assert_eq!(shaders[0], variant, "{what}: the kernel that ran");
                    if splits == Some("1") {
                        assert_eq!(shaders.len(), 1, "{what}: one split, one dispatch");
                    }
                    c.check(&what, &got);
                }
            }
        }
    }
    // The caller clears every tuning variable afterwards.
}

/// One case of the fast-mode streaming tests: an m x n x k linear with x read from element x0
/// of its buffer, weights of dtype `dt` (their bytes, and widened to f32 for the reference), a
/// bias that is used or not, and an activation.
struct FastCase {
    m: usize,
    n: usize,
    k: usize,
    x: Vec<f32>,
    x0: usize,
    dt: DType,
    bytes: Vec<u8>,
    wref: Vec<f32>,
    bias: Vec<f32>,
    with_bias: bool,
    act: Activation,
}

/// Every weight dtype of every shape, drawn from `r` shape by shape (x, weights, bias): x at
/// element `si % 2` for shape si, the activation cycling with shape and dtype, and the bias
/// used where `(si + di) % 2 == bias_parity` (di the dtype's index).
fn fast_cases(r: &mut Rng, shapes: &[(usize, usize, usize)], bias_parity: usize) -> Vec<FastCase> {
    let acts = [Activation::None, Activation::Silu, Activation::Relu];
    let mut cases = Vec::new();
    for (si, &(m, n, k)) in shapes.iter().enumerate() {
        let x = r.vec(m * k + 1, -1.0, 1.0);
        let wf = r.vec(n * k, -1.0, 1.0);
        let bias = r.vec(n, -1.0, 1.0);
        for (di, case) in weight_dtypes(&wf, k).iter().enumerate() {
            let mut wref = vec![0f32; n * k];
            reference_weights(&wf, case).widen_into(0, &mut wref);
            cases.push(FastCase {
                m,
                n,
                k,
                x: x.clone(),
                x0: si % 2,
                dt: case.0,
                bytes: case.1.clone(),
                wref,
                bias: bias.clone(),
                with_bias: (si + di) % 2 == bias_parity,
                act: acts[(si + di) % acts.len()],
            });
        }
    }
    cases
}

impl FastCase {
    /// Records and runs the linear on `b` with the weights at element `w0` of their buffer
    /// (zeros before them), twice ([`run_twice`]): y, and the module of each dispatch.
    fn run(&self, b: &VulkanBackend, w0: usize) -> (Vec<f32>, Vec<&'static str>) {
        let (m, n, k, dt) = (self.m, self.n, self.k, self.dt);
        let p = LinearParams {
            m,
            n,
            k,
            activation: self.act,
        };
        let xb = upload_f32(b, &self.x);
        let xr = xb.slice(self.x0, m * k).unwrap();
        let mut padded = vec![0u8; dt.bytes_for(w0).unwrap()];
        padded.extend_from_slice(&self.bytes);
        let wbuf = upload(b, dt, &padded, w0 + n * k);
        let wr = wbuf.slice(w0, n * k).unwrap();
        let bb = upload_f32(b, &self.bias);
        let y = alloc(b, DType::F32, m * n);
        let mut rec = b.begin().unwrap();
        b.linear(&mut rec, &p, &xr, &wr, self.with_bias.then_some(&bb), &y)
            .unwrap();
        let shaders = rec.shaders().to_vec();
        let (got, _) = run_twice(b, &rec, &y, m * n);
        (got, shaders)
    }

    /// `got` within the bound of the tiled cooperative-matrix linear: f16 operands, f32 sums
    /// (the f64 reference), times 1.1 for the activation: ReLU is 1-Lipschitz and SiLU's slope
    /// stays within 1.1, and the activation's own rounding (a few ulp of |v|, and |v| is at
    /// most the scale) is far below the rest of that margin.
    fn check(&self, what: &str, got: &[f32]) {
        let (m, n, k) = (self.m, self.n, self.k);
        let xs = &self.x[self.x0..][..m * k];
        let [mut want, mut scale] = gemm_f64(xs, &self.wref, (m, n, k), true);
        for (i, (w, s)) in want.iter_mut().zip(scale.iter_mut()).enumerate() {
            let b = if self.with_bias {
                f64::from(self.bias[i % n])
            } else {
                0.0
            };
            *w = match self.act {
                Activation::Relu => (*w + b).max(0.0),
                Activation::Silu => {
                    let v = *w + b;
                    v / (1.0 + (-v).exp())
                }
                _ => *w + b,
            };
            *s = 1.1 * (*s + b.abs());
        }
        let rel = COOPMAT_F16_INPUT_REL + strict_gemm_rel(k);
        let abs = 1.1 * k as f64 * COOPMAT_F16_SUBNORMAL_ABS;
        assert_gemm(what, got, &[want, scale], rel, abs);
    }
}

/// The direct fast-mode streaming variants, by module name
/// (`gemm_policy::stream::CM_DIRECT`).
const CM_DIRECT: [&str; 3] = [
    "linear_cm_direct_32x128x256_32x32_u4",
    "linear_cm_direct_32x128x256_32x16_u4",
    "linear_cm_direct_32x256x256_32x32_u4",
];

/// The lane-loading variants (`gemm_policy::stream::CM_LANE`): they run where the device's
/// probed fragment layout is the one they assume, and the direct variant the default picks for
/// these narrow outputs otherwise.
const CM_LANE: [&str; 5] = [
    "linear_cm_lane_32x256x256_32x32_u4",
    "linear_cm_lane_32x128x256_32x16_u4",
    "linear_cm_lane_32x128x256_32x32_u4",
    "linear_cm_lane_32x128x256_32x32_u8",
    "linear_cm_lane_64x128x128_64x32_u4",
];

/// The lane variants that read q8_0 weights (`gemm_policy::stream::CM_LANE_Q8`), the default
/// for narrow outputs second.
const CM_LANE_Q8: [&str; 2] = [CM_LANE[2], CM_LANE[1]];

/// The lane variant the default policy runs as a GEMM for more than 64 rows and at most 2^23
/// weights (`gemm_policy::stream::lane_gemm_kernel`): 8 subgroups of 32 x 32 over 256 columns.
const LANE_GEMM: &str = CM_LANE[0];

/// The kernel that runs an m x n x k linear of `dt` weights (n <= 2048, at element 0) with
/// `variant` forced, on a device whose probed fragment layout allows lane loads or not: 16-bit
/// weights that variant (a lane one only with the probe, else the direct default for narrow
/// outputs); q8_0 with the probe and k in whole windows of 64 the variant if it reads q8_0
/// ([`CM_LANE_Q8`]), else the q8_0 lane default for narrow outputs; anything else the staged
/// default.
fn expected_kernel(variant: &'static str, dt: DType, k: usize, lane_device: bool) -> &'static str {
    let lane = CM_LANE.contains(&variant);
    match dt {
        DType::F16 | DType::BF16 if lane && !lane_device => CM_DIRECT[1],
        DType::F16 | DType::BF16 => variant,
        DType::Q8_0 if lane_device && k.is_multiple_of(64) => {
            if CM_LANE_Q8.contains(&variant) {
                variant
            } else {
                CM_LANE_Q8[1]
            }
        }
        _ => CM_STREAM[2],
    }
}

/// Fast mode's streaming linear with the weights loaded straight into cooperative matrices
/// (`linear_cm.comp` with `DIRECT`), each variant forced: k and n multiples of 16 (what it
/// reads), m from 2 to 64 (one and two row blocks), k shorter than, equal to and longer than a
/// chunk of x and off the unroll, x at an odd offset, bias and activations. With one split it
/// must give the staged default's bits (the same products in the same order: k multiples of
/// 32, so the staged kernel adds no zero steps); with the automatic splits and 3 it must stay
/// within the cooperative-matrix bound, fold and reduce alike, run again alike. f32 weights,
/// q8_0 weights that no lane variant reads ([`expected_kernel`]), and f16 weights off a
/// 16-byte boundary must run the staged default instead. The
/// lane-loading variants ([`CM_LANE`]; k permuted within windows of 64) are held to the same
/// bound, fold and reduce alike, but not to the staged kernel's bits (their products are summed
/// in another order). On a device without cooperative matrices, `linear_stream` runs (checked
/// by the test above).
fn cm_direct_linear_matches_the_staged_kernel(devices: &[kinema::vulkan::DeviceSummary]) {
    set("KINEMA_VK_LINEAR", Some("stream"));
    let staged = CM_STREAM[2];
    let shapes: &[(usize, usize, usize)] = &[
        (32, 128, 320),
        (7, 64, 64),
        (33, 48, 96),
        (64, 80, 544),
        (2, 256, 1024),
        (16, 144, 1056),
        (97, 96, 192),
    ];
    let mut r = Rng(83);
    for d in devices {
        let mut o = VulkanOptions::new(Precision::Fast);
        o.device = Some(d.index);
        let fast = VulkanBackend::with_options(o).unwrap();
        if !fast.info().cooperative_matrix {
            eprintln!(
                "NOTICE: {} has no cooperative matrix: the direct streaming variants are not \
                 tested here",
                fast.device_name()
            );
            continue;
        }
        for c in fast_cases(&mut r, shapes, 1) {
            let FastCase {
                m,
                n,
                k,
                dt,
                act,
                with_bias,
                x0,
                ..
            } = c;
            let run = |b: &VulkanBackend, w0: usize| c.run(b, w0);
            let direct = matches!(dt, DType::F16 | DType::BF16);
            set("KINEMA_VK_STREAM_SPLITS", Some("1"));
            set("KINEMA_VK_CM_STREAM", Some(staged));
            let (want, _) = run(&fast, 0);
            for variant in CM_DIRECT.iter().chain(&CM_LANE).copied() {
                let runs = expected_kernel(variant, dt, k, fast.lane_fragment_layout());
                set("KINEMA_VK_CM_STREAM", Some(variant));
                for splits in [Some("1"), None, Some("3")] {
                    set("KINEMA_VK_STREAM_SPLITS", splits);
                    let what = format!(
                        "direct stream linear {m}x{n}x{k} {dt} {act:?} bias {with_bias} x \
                             at {x0} {variant} splits {splits:?} on {}",
                        fast.device_name()
                    );
                    set("KINEMA_VK_STREAM_FOLD", Some("1"));
                    let (got, shaders) = run(&fast, 0);
                    set("KINEMA_VK_STREAM_FOLD", None);
                    let (unfolded, _) = run(&fast, 0);
                    assert_same_bits(&what, &got, &unfolded);
                    assert_eq!(shaders[0], runs, "{what}: the kernel that ran");
                    if splits == Some("1") && !CM_LANE.contains(&runs) {
                        assert_same_bits(&format!("{what}: the staged kernel"), &got, &want);
                    }
                    c.check(&what, &got);
                }
                // Off a 16-byte boundary (4 halves in): the staged default.
                if direct {
                    set("KINEMA_VK_STREAM_SPLITS", Some("1"));
                    let (got, shaders) = run(&fast, 4);
                    let what = format!("{variant} {m}x{n}x{k} {dt}: weights at element 4");
                    assert_eq!(shaders[0], staged, "{what}");
                    assert_same_bits(&what, &got, &want);
                }
            }
        }
        // The default policy at more rows than the streaming window (Kimodo's linears have 404
        // and 606): 16-bit weights of 2^20 elements run the lane kernel as a GEMM, one
        // workgroup per row block, where the probe agreed, and q8_0 weights the q8_0 lane
        // default; every dtype within the bound.
        set("KINEMA_VK_LINEAR", None);
        set("KINEMA_VK_CM_STREAM", None);
        set("KINEMA_VK_STREAM_SPLITS", None);
        // Above 1024 rows (Kimodo's batched motions) 16-bit weights of Kimodo's sizes still run
        // the lane GEMM (its grid's third dimension walks 33 row blocks here); q8_0 the tiled
        // kernels.
        // Weights above 2^23 (LLM2Vec's at batches of prompts) run the 64-row lane tile, q8_0
        // too.
        let shapes = [(200, 1024, 1024), (1056, 1024, 1024), (96, 4096, 2112)];
        for c in fast_cases(&mut r, &shapes, 0) {
            let (got, shaders) = c.run(&fast, 0);
            let what = format!(
                "default linear {}x{}x{} {} on {}",
                c.m,
                c.n,
                c.k,
                c.dt,
                fast.device_name()
            );
            let wide = c.n * c.k > 1 << 23;
            if fast.lane_fragment_layout() && matches!(c.dt, DType::F16 | DType::BF16) {
                let want = if wide { CM_LANE[4] } else { LANE_GEMM };
                assert_eq!(shaders[0], want, "{what}: the kernel that ran");
            }
            if fast.lane_fragment_layout() && c.dt == DType::Q8_0 {
                let want = match (wide, c.m <= 1024) {
                    (true, _) => CM_LANE[4],
                    (false, true) => CM_LANE_Q8[0],
                    (false, false) => "linear_cm_128x128x32_64x32",
                };
                assert_eq!(shaders[0], want, "{what}: the kernel that ran");
            }
            c.check(&what, &got);
        }
        set("KINEMA_VK_LINEAR", Some("stream"));
    }
    // The caller clears every tuning variable afterwards.
}

/// Submits `rec` (which writes the `len` floats of `y`), then again after `y` is overwritten
/// with NaN: the second run must give the same bits (a folded split's arrival counters are
/// back at zero after each run). The result and the recording's dispatch count.
fn run_twice(
    b: &VulkanBackend,
    rec: &<VulkanBackend as Backend>::Recording,
    y: &kinema::backend::BufRef<<VulkanBackend as Backend>::Buffer>,
    len: usize,
) -> (Vec<f32>, usize) {
    b.submit(rec).unwrap();
    let first = download_f32(b, y);
    b.write(y, bytemuck::cast_slice(&vec![f32::NAN; len]))
        .unwrap();
    b.submit(rec).unwrap();
    let second = download_f32(b, y);
    assert_same_bits("the same recording run again", &first, &second);
    (first, rec.dispatches())
}
