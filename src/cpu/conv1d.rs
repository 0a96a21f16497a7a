//! 1-D convolution (stride 1, zero padding, dilation) and nearest x2 upsampling, as used by
//! MotionBricks' conv upsampler (kernels 1 and 3).
//!
//! The SIMD convolution is a register-tiled GEMM `y[co, t] = bias[co] + sum_{ci, k}
//! w[co, ci, k] x_pad[ci, t + k dilation]` over `c_out x (c_in kernel)`: the weights are used in
//! PyTorch's `[c_out, c_in, kernel]` layout as they are (a row per output channel, broadcast
//! one value at a time), and the reduction rows are shifted views of one zero-padded copy of
//! x (no im2col). A tile is `MR` output channels by two vectors of output positions; the sum
//! runs over `(ci, k)` in the reference's order. Work is split over (batch, block of output
//! channels), so results do not depend on the thread count.

use super::pool::SendPtr;
use super::simd::Simd;
use super::{Cx, Isa};
use crate::ops::{Conv1dParams, UpsampleParams};

/// Output channels per register tile (12 accumulators with two vectors of positions).
const MR: usize = 6;
/// Register tiles of output channels per pool task.
const TILES_PER_TASK: usize = 4;
/// Input elements per upsampling task: small inputs stay on one thread.
const UPSAMPLE_CHUNK: usize = 1 << 15;
/// Input rows the convolution prefetches ahead: consecutive (c_in) steps are a padded row
/// apart, a stride hardware prefetchers follow poorly once x outgrows L1 (L = 64).
const PREFETCH_ROWS: usize = 8;

pub mod reference {
    use crate::ops::{Conv1dParams, UpsampleParams};

    pub fn conv1d(p: &Conv1dParams, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
        let out_len = p
            .out_len()
            .expect("conv1d parameters were checked when recorded");
        for b in 0..p.batch {
            for co in 0..p.c_out {
                for t in 0..out_len {
                    let mut acc = bias.map_or(0.0, |b| b[co] as f64);
                    for ci in 0..p.c_in {
                        for kk in 0..p.kernel {
                            let src = (t + kk * p.dilation) as isize - p.padding as isize;
                            if src < 0 || src as usize >= p.len {
                                continue;
                            }
                            acc += w[(co * p.c_in + ci) * p.kernel + kk] as f64
                                * x[(b * p.c_in + ci) * p.len + src as usize] as f64;
                        }
                    }
                    y[(b * p.c_out + co) * out_len + t] = acc as f32;
                }
            }
        }
    }

    pub fn upsample_nearest2x(p: &UpsampleParams, x: &[f32], y: &mut [f32]) {
        for r in 0..p.rows {
            for i in 0..p.len {
                let v = x[r * p.len + i];
                y[r * 2 * p.len + 2 * i] = v;
                y[r * 2 * p.len + 2 * i + 1] = v;
            }
        }
    }
}

pub fn conv1d(
    cx: &Cx,
    p: &Conv1dParams,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let out_len = p
        .out_len()
        .expect("conv1d parameters were checked when recorded");
    assert!(p.dilation > 0 && x.len() >= p.batch * p.c_in * p.len);
    assert!(w.len() >= p.c_out * p.c_in * p.kernel && y.len() >= p.batch * p.c_out * out_len);
    assert!(bias.is_none_or(|b| b.len() >= p.c_out));
    assert!(
        cx.isa.is_supported(),
        "{} is not supported here",
        cx.isa.name()
    );
    match cx.isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: AVX-512 was detected above (`Isa::is_supported`) and the
            // operand sizes were checked.
            unsafe { run::<x86::Avx512>(cx, p, out_len, x, w, bias, y) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: AVX2 was detected above (`Isa::is_supported`) and the
            // operand sizes were checked.
            unsafe { run::<x86::Avx2>(cx, p, out_len, x, w, bias, y) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => {
            // SAFETY: NEON was detected above (`Isa::is_supported`) and the
            // operand sizes were checked.
            unsafe { run::<arm::Neon>(cx, p, out_len, x, w, bias, y) }
        }
        _ => cx.pool.par_chunks_mut(
            &mut y[..p.batch * p.c_out * out_len],
            p.c_out * out_len,
            |b, out| {
                let one = Conv1dParams { batch: 1, ..*p };
                let x = &x[b * p.c_in * p.len..(b + 1) * p.c_in * p.len];
                reference::conv1d(&one, x, w, bias, out);
            },
        ),
    }
}

/// One ISA's convolution micro-kernel.
trait Kernels {
    /// f32 lanes per vector; a tile is `MR x (NV * LANES)`, `NV` 1 or 2.
    const LANES: usize;

    /// `out[r][c] = bias[r] + sum_{ci < c_in} sum_{k < kernel} w[r][ci kernel + k]
    /// x[ci lrow + k dilation + c]` for every `r` with `out[r]` not null and `c < cols`,
    /// summed in increasing `(ci, k)`. `KS` is the kernel size when fixed at compile time
    /// (MotionBricks' 1 and 3, so the tap loop unrolls and shares one index), 0 to read it
    /// from `p`.
    ///
    /// # Safety
    /// The ISA is supported; `1 <= cols <= NV * LANES`; each `w[r]` holds `c_in * kernel`
    /// values; `x` is readable at `ci lrow + k dilation + c` for `c < NV * LANES`; each
    /// non-null `out[r]` is writable for `cols` values.
    unsafe fn tile<const NV: usize, const KS: usize>(
        w: &[*const f32; MR],
        bias: &[f32; MR],
        x: *const f32,
        p: &Conv1dParams,
        lrow: usize,
        cols: usize,
        out: &[*mut f32; MR],
    );
}

/// The blocked driver shared by every SIMD ISA.
///
/// # Safety
/// `K`'s ISA is supported by this CPU and the operand sizes passed the entry point's checks.
unsafe fn run<K: Kernels>(
    cx: &Cx,
    p: &Conv1dParams,
    out_len: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let nr = 2 * K::LANES;
    let ck = p.c_in * p.kernel;
    // Zero-padded input rows, long enough for whole vectors past the last output position:
    // `(kernel - 1) dilation + out_len = len + 2 padding <= lrow`.
    let lrow = (p.kernel - 1) * p.dilation + out_len.next_multiple_of(nr);
    let mut xp = vec![0f32; p.batch * p.c_in * lrow];
    // An empty input (all padding) leaves the zeros.
    if p.len > 0 {
        for (dst, src) in xp.chunks_mut(lrow).zip(x.chunks(p.len)) {
            dst[p.padding..p.padding + p.len].copy_from_slice(src);
        }
    }
    let per_task = MR * TILES_PER_TASK;
    let blocks = p.c_out.div_ceil(per_task);
    let yp = SendPtr(y.as_mut_ptr());
    cx.pool.run(p.batch * blocks, &|task| {
        let (b, blk) = (task / blocks, task % blocks);
        let xb = &xp[b * p.c_in * lrow..(b + 1) * p.c_in * lrow];
        let co_end = p.c_out.min((blk + 1) * per_task);
        for co0 in (blk * per_task..co_end).step_by(MR) {
            let rows = MR.min(co_end - co0);
            // Rows past c_out repeat the last one (read, never stored).
            let co = |r: usize| co0 + r.min(rows - 1);
            let wr: [*const f32; MR] = std::array::from_fn(|r| w[co(r) * ck..][..ck].as_ptr());
            let br: [f32; MR] = std::array::from_fn(|r| bias.map_or(0.0, |bias| bias[co(r)]));
            for t0 in (0..out_len).step_by(nr) {
                let cols = nr.min(out_len - t0);
                let out: [*mut f32; MR] = std::array::from_fn(|r| {
                    if r < rows {
                        // SAFETY: row (b, co0 + r) of y, position t0 < out_len.
                        unsafe { yp.get().add((b * p.c_out + co0 + r) * out_len + t0) }
                    } else {
                        std::ptr::null_mut()
                    }
                });
                let xt = xb[t0..].as_ptr();
                // SAFETY: each weight row holds ck values; x is read at ci lrow + k dilation +
                // t0 + c < c_in lrow for c < nr (lrow's definition); each output row has
                // out_len - t0 >= cols values, written by this task only.
                unsafe {
                    match (cols <= K::LANES, p.kernel) {
                        (true, 1) => K::tile::<1, 1>(&wr, &br, xt, p, lrow, cols, &out),
                        (true, 3) => K::tile::<1, 3>(&wr, &br, xt, p, lrow, cols, &out),
                        (true, _) => K::tile::<1, 0>(&wr, &br, xt, p, lrow, cols, &out),
                        (false, 1) => K::tile::<2, 1>(&wr, &br, xt, p, lrow, cols, &out),
                        (false, 3) => K::tile::<2, 3>(&wr, &br, xt, p, lrow, cols, &out),
                        (false, _) => K::tile::<2, 0>(&wr, &br, xt, p, lrow, cols, &out),
                    }
                }
            }
        }
    });
}

pub fn upsample_nearest2x(cx: &Cx, p: &UpsampleParams, x: &[f32], y: &mut [f32]) {
    let n = p.rows * p.len;
    assert!(x.len() >= n && y.len() >= 2 * n);
    assert!(
        cx.isa.is_supported(),
        "{} is not supported here",
        cx.isa.name()
    );
    let isa = cx.isa;
    // Rows are contiguous in both tensors, so this duplicates a flat run of n values.
    cx.pool
        .par_chunks_mut(&mut y[..2 * n], 2 * UPSAMPLE_CHUNK, |c, out| {
            let src = &x[c * UPSAMPLE_CHUNK..][..out.len() / 2];
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => {
                    // SAFETY: AVX-512 was detected above (`Isa::is_supported`).
                    unsafe { x86::duplicate_avx512(src, out) }
                }
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => {
                    // SAFETY: AVX2 was detected above (`Isa::is_supported`).
                    unsafe { x86::duplicate_avx2(src, out) }
                }
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => {
                    // SAFETY: NEON was detected above (`Isa::is_supported`).
                    unsafe { arm::duplicate_neon(src, out) }
                }
                _ => duplicate_tail(0, src, out),
            }
        });
}

/// `out[2i] = out[2i + 1] = src[i]` from `i = from`.
fn duplicate_tail(from: usize, src: &[f32], out: &mut [f32]) {
    for (o, &v) in out[2 * from..].chunks_exact_mut(2).zip(&src[from..]) {
        o[0] = v;
        o[1] = v;
    }
}

/// The register tile of [`Kernels::tile`], written once over the [`Simd`] token: `MR x NV`
/// accumulators start at the bias and take one FMA `w * x + acc` per `(ci, k)`, in the
/// reference's order, so every ISA computes each output with the same roundings. `prefetch`
/// is the ISA's cache hint for the input row `PREFETCH_ROWS` ahead.
///
/// # Safety
/// As [`Kernels::tile`] with `S`'s lanes; `s` proves the ISA.
#[inline(always)]
unsafe fn tile_simd<S: Simd, const NV: usize, const KS: usize>(
    s: S,
    prefetch: impl Fn(*const f32),
    w: &[*const f32; MR],
    bias: &[f32; MR],
    x: *const f32,
    p: &Conv1dParams,
    lrow: usize,
    cols: usize,
    out: &[*mut f32; MR],
) {
    let lanes = S::LANES;
    let kernel = if KS == 0 { p.kernel } else { KS };
    let mut acc: [[S::F; NV]; MR] = std::array::from_fn(|r| [s.splat(bias[r]); NV]);
    for ci in 0..p.c_in {
        prefetch(x.wrapping_add((ci + PREFETCH_ROWS) * lrow));
        for k in 0..kernel {
            // SAFETY: x + ci lrow + k dilation + NV lanes is readable and w[r] holds
            // c_in kernel values (contract).
            unsafe {
                let xk = x.add(ci * lrow + k * p.dilation);
                let xv: [S::F; NV] = std::array::from_fn(|v| s.load(xk.add(lanes * v)));
                for (r, a) in acc.iter_mut().enumerate() {
                    let wv = s.splat(*w[r].add(ci * kernel + k));
                    for (a, &xv) in a.iter_mut().zip(&xv) {
                        *a = s.mul_add(wv, xv, *a);
                    }
                }
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        if out[r].is_null() {
            continue;
        }
        for (v, &a) in a.iter().enumerate() {
            let left = cols.saturating_sub(lanes * v).min(lanes);
            // SAFETY: out[r] is writable for cols values (contract), so for the `left > 0`
            // values from lanes v; a partial vector stores only its first `left` lanes.
            unsafe {
                if left == lanes {
                    s.store(out[r].add(lanes * v), a);
                } else if left > 0 {
                    s.store_part(out[r].add(lanes * v), left, a);
                }
            }
        }
    }
}

/// `impl Kernels for $name` on the [`Simd`] token `$token`: [`tile_simd`] compiled inside a
/// `#[target_feature($features)]` function.
macro_rules! simd_kernels {
    ($name:ident, $token:ty, $features:literal, $prefetch:expr) => {
        pub struct $name;

        impl Kernels for $name {
            const LANES: usize = <$token as Simd>::LANES;
            unsafe fn tile<const NV: usize, const KS: usize>(
                w: &[*const f32; MR],
                bias: &[f32; MR],
                x: *const f32,
                p: &Conv1dParams,
                lrow: usize,
                cols: usize,
                out: &[*mut f32; MR],
            ) {
                #[target_feature(enable = $features)]
                unsafe fn tile_isa<const NV: usize, const KS: usize>(
                    w: &[*const f32; MR],
                    bias: &[f32; MR],
                    x: *const f32,
                    p: &Conv1dParams,
                    lrow: usize,
                    cols: usize,
                    out: &[*mut f32; MR],
                ) {
                    let s = <$token>::new();
                    // SAFETY: the token proves the ISA; the rest is the forwarded contract.
                    unsafe { tile_simd::<_, NV, KS>(s, $prefetch, w, bias, x, p, lrow, cols, out) }
                }
                // SAFETY: the ISA is supported and the operands hold (forwarded contract).
                unsafe { tile_isa::<NV, KS>(w, bias, x, p, lrow, cols, out) }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Conv1dParams, Kernels, MR, Simd, duplicate_tail, tile_simd};
    use crate::cpu::simd::{avx2, avx512};
    use std::arch::x86_64::*;

    /// Hints the cache lines at `p` and 16 floats on (a hint: it never faults).
    fn prefetch(p: *const f32) {
        // SAFETY: SSE is part of x86-64's baseline, and PREFETCHT0 is a hint: it never
        // faults and changes no architectural state, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p.cast());
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(16).cast());
        }
    }

    simd_kernels!(Avx2, avx2::Avx2, "avx2,fma,f16c", prefetch);
    simd_kernels!(
        Avx512,
        avx512::Avx512,
        "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c",
        prefetch
    );

    /// # Safety
    /// The CPU supports AVX2; `out` holds `2 * src.len()` values.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn duplicate_avx2(src: &[f32], out: &mut [f32]) {
        let full = src.len() / 8 * 8;
        for i in (0..full).step_by(8) {
            // SAFETY: i + 8 <= src.len() and 2 i + 16 <= out.len().
            unsafe {
                let v = _mm256_loadu_ps(src.as_ptr().add(i));
                // [v0 v0 v1 v1 | v4 v4 v5 v5] and [v2 v2 v3 v3 | v6 v6 v7 v7]
                let (lo, hi) = (_mm256_unpacklo_ps(v, v), _mm256_unpackhi_ps(v, v));
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(2 * i),
                    _mm256_permute2f128_ps::<0x20>(lo, hi),
                );
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(2 * i + 8),
                    _mm256_permute2f128_ps::<0x31>(lo, hi),
                );
            }
        }
        duplicate_tail(full, src, out);
    }

    /// # Safety
    /// The CPU supports the AVX-512 set of `Isa::Avx512`; `out` holds `2 * src.len()` values.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    pub unsafe fn duplicate_avx512(src: &[f32], out: &mut [f32]) {
        let lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        let hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
        let full = src.len() / 16 * 16;
        for i in (0..full).step_by(16) {
            // SAFETY: i + 16 <= src.len() and 2 i + 32 <= out.len().
            unsafe {
                let v = _mm512_loadu_ps(src.as_ptr().add(i));
                _mm512_storeu_ps(out.as_mut_ptr().add(2 * i), _mm512_permutexvar_ps(lo, v));
                _mm512_storeu_ps(
                    out.as_mut_ptr().add(2 * i + 16),
                    _mm512_permutexvar_ps(hi, v),
                );
            }
        }
        duplicate_tail(full, src, out);
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::{Conv1dParams, Kernels, MR, Simd, duplicate_tail, tile_simd};
    use crate::cpu::simd::neon;
    use std::arch::aarch64::*;

    /// Hints the cache line at `p` (PRFM: it never faults and changes no architectural state).
    fn prefetch(p: *const f32) {
        // SAFETY: PRFM is a hint: it never faults and changes no architectural state.
        unsafe {
            std::arch::asm!(
                "prfm pldl1keep, [{0}]",
                in(reg) p,
                options(nostack, readonly, preserves_flags)
            )
        };
    }

    simd_kernels!(Neon, neon::Neon, "neon", prefetch);

    /// # Safety
    /// The CPU supports NEON; `out` holds `2 * src.len()` values.
    #[target_feature(enable = "neon")]
    pub unsafe fn duplicate_neon(src: &[f32], out: &mut [f32]) {
        let full = src.len() / 4 * 4;
        for i in (0..full).step_by(4) {
            // SAFETY: i + 4 <= src.len() and 2 i + 8 <= out.len(); ST2 interleaves v with
            // itself: v0 v0 v1 v1 v2 v2 v3 v3.
            unsafe {
                let v = vld1q_f32(src.as_ptr().add(i));
                vst2q_f32(out.as_mut_ptr().add(2 * i), float32x4x2_t(v, v));
            }
        }
        duplicate_tail(full, src, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ThreadPool;
    use crate::rng::uniform;
    use proptest::prelude::*;

    /// Multiplier on the recursive-summation bound of an output against the f64 reference:
    /// an f32 FMA chain over `n = c_in * kernel` products after the bias errs by at most
    /// `n * eps/2 * (|bias| + sum |w x|)`, and the reference's final rounding adds `eps/2 |y|`.
    const CONV_TOL_ULPS: f32 = 1.0;

    struct Case {
        p: Conv1dParams,
        x: Vec<f32>,
        w: Vec<f32>,
        bias: Option<Vec<f32>>,
    }

    impl std::fmt::Debug for Case {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?} bias {}", self.p, self.bias.is_some())
        }
    }

    fn values(seed: u64, n: usize) -> Vec<f32> {
        (0..n as u64)
            .map(|i| 2.0 * uniform(seed, i) - 1.0)
            .collect()
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            (1..=2usize, 1..=12usize, 1..=30usize),
            (
                prop_oneof![Just(1usize), Just(3), Just(2), Just(5)],
                0..=3usize,
                1..=4usize,
            ),
            (0..=70usize, any::<bool>(), any::<u64>()),
        )
            .prop_map(
                |((batch, c_in, c_out), (kernel, padding, dilation), (extra, bias, seed))| {
                    // Lengths from the smallest that leaves one output position (0 when the padding
                    // alone covers the kernel span).
                    let span = (kernel - 1) * dilation + 1;
                    let len = span.saturating_sub(2 * padding) + extra % 40;
                    let p = Conv1dParams {
                        batch,
                        c_in,
                        c_out,
                        len,
                        kernel,
                        padding,
                        dilation,
                    };
                    Case {
                        x: values(seed, batch * c_in * len),
                        w: values(seed ^ 1, c_out * c_in * kernel),
                        bias: bias.then(|| values(seed ^ 2, c_out)),
                        p,
                    }
                },
            )
    }

    impl Case {
        /// A case on `x` with weights and bias drawn from `seed` and `seed + 1`.
        fn with_bias(p: Conv1dParams, x: Vec<f32>, seed: u64) -> Case {
            Case {
                w: values(seed, p.c_out * p.c_in * p.kernel),
                bias: Some(values(seed + 1, p.c_out)),
                p,
                x,
            }
        }
    }

    fn run(c: &Case, isa: Isa, threads: usize) -> Vec<f32> {
        let pool = ThreadPool::new(threads);
        let cx = Cx::strict(isa, &pool);
        let mut y = vec![f32::NAN; c.p.batch * c.p.c_out * c.p.out_len().unwrap()];
        conv1d(&cx, &c.p, &c.x, &c.w, c.bias.as_deref(), &mut y);
        y
    }

    /// `(|bias| + sum |w x|)` of output `(b, co, t)`.
    fn abs_sum(c: &Case, b: usize, co: usize, t: usize) -> f32 {
        let p = &c.p;
        let mut s = c.bias.as_ref().map_or(0.0, |bias| bias[co].abs());
        for ci in 0..p.c_in {
            for k in 0..p.kernel {
                let src = (t + k * p.dilation) as isize - p.padding as isize;
                if (0..p.len as isize).contains(&src) {
                    s += (c.w[(co * p.c_in + ci) * p.kernel + k]
                        * c.x[(b * p.c_in + ci) * p.len + src as usize])
                        .abs();
                }
            }
        }
        s
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn conv1d_matches_reference_on_every_isa(c in case()) {
            let p = &c.p;
            let out_len = p.out_len().unwrap();
            let mut want = vec![f32::NAN; p.batch * p.c_out * out_len];
            reference::conv1d(p, &c.x, &c.w, c.bias.as_deref(), &mut want);
            let n = (p.c_in * p.kernel + 1) as f32;
            for isa in Isa::available() {
                let one = run(&c, isa, 1);
                for (i, (g, w)) in one.iter().zip(&want).enumerate() {
                    let (b, co, t) = (i / (p.c_out * out_len), i / out_len % p.c_out, i % out_len);
                    let tol = CONV_TOL_ULPS * n * f32::EPSILON / 2.0 * abs_sum(&c, b, co, t);
                    prop_assert!(
                        (g - w).abs() <= tol,
                        "{}: y[{b}, {co}, {t}] = {g}, reference {w}, tol {tol}", isa.name()
                    );
                }
                let two = run(&c, isa, 2);
                prop_assert!(
                    one.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{}: 1 and 2 threads differ", isa.name()
                );
            }
        }

        #[test]
        fn upsample_copies_bits_on_every_isa(rows in 1..=9usize, len in 0..=150usize, seed: u64) {
            let p = UpsampleParams { rows, len };
            // Arbitrary bit patterns, NaN payloads included: the copy must be exact.
            let x: Vec<f32> = (0..(rows * len) as u64)
                .map(|i| f32::from_bits(crate::rng::splitmix64(seed, i) as u32))
                .collect();
            let mut want = vec![0f32; 2 * rows * len];
            reference::upsample_nearest2x(&p, &x, &mut want);
            for isa in Isa::available() {
                for threads in [1, 2] {
                    let pool = ThreadPool::new(threads);
                    let cx = Cx::strict(isa, &pool);
                    let mut y = vec![0f32; 2 * rows * len + 3];
                    upsample_nearest2x(&cx, &p, &x, &mut y);
                    prop_assert!(
                        y[..2 * rows * len].iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{} with {threads} threads", isa.name()
                    );
                    prop_assert!(y[2 * rows * len..].iter().all(|&v| v == 0.0), "wrote past the end");
                }
            }
        }
    }

    /// Large inputs split over several upsampling tasks.
    #[test]
    fn upsample_splits_large_inputs() {
        let p = UpsampleParams {
            rows: 3,
            len: UPSAMPLE_CHUNK + 77,
        };
        let x: Vec<f32> = (0..p.rows * p.len).map(|i| i as f32).collect();
        let mut want = vec![0f32; 2 * x.len()];
        reference::upsample_nearest2x(&p, &x, &mut want);
        for isa in Isa::available() {
            let pool = ThreadPool::new(2);
            let cx = Cx::strict(isa, &pool);
            let mut y = vec![0f32; 2 * x.len()];
            upsample_nearest2x(&cx, &p, &x, &mut y);
            assert_eq!(y, want, "{}", isa.name());
        }
    }

    /// An empty input with padding: every output is the bias (the kernel sees only zeros).
    #[test]
    fn empty_input_gives_the_bias() {
        let p = Conv1dParams {
            batch: 2,
            c_in: 3,
            c_out: 5,
            len: 0,
            kernel: 3,
            padding: 2,
            dilation: 1,
        };
        let c = Case::with_bias(p, vec![], 8);
        for isa in Isa::available() {
            let got = run(&c, isa, 2);
            let want: Vec<f32> = (0..2 * 5 * 2)
                .map(|i| c.bias.as_ref().unwrap()[i / 2 % 5])
                .collect();
            assert_eq!(got, want, "{}", isa.name());
        }
    }

    /// A NaN input reaches exactly the outputs whose window covers it (zero padding never
    /// turns into NaN), as in the reference.
    #[test]
    fn nan_reaches_only_its_window() {
        let p = Conv1dParams {
            batch: 1,
            c_in: 3,
            c_out: 7,
            len: 21,
            kernel: 3,
            padding: 2,
            dilation: 2,
        };
        let mut x = values(5, 3 * 21);
        x[21 + 10] = f32::NAN;
        let c = Case::with_bias(p, x, 6);
        let mut want = vec![0f32; 7 * 21];
        reference::conv1d(&p, &c.x, &c.w, c.bias.as_deref(), &mut want);
        for isa in Isa::available() {
            let got = run(&c, isa, 1);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.is_nan(), w.is_nan(), "{} y[{i}]", isa.name());
            }
            assert_eq!(got.iter().filter(|v| v.is_nan()).count(), 7 * 3);
        }
    }
}
