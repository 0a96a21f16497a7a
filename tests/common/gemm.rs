//! GEMM checks shared by the Vulkan tests: the f64 reference with its error scale, the strict
//! f32 bound, and every weight dtype of one matrix.

use half::{bf16, f16};
use kinema::cpu::Weights;
use kinema::tensor::{DType, Q8_0_BLOCK_BYTES, q8_0_quantize_block};

/// f64 reference of `a . op(b)` (a row-major `m x k`; b `n x k` when `bt`, else `k x n`) and,
/// per output, `sum |a_i b_i|`, the scale of its rounding error.
pub fn gemm_f64(a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), bt: bool) -> [Vec<f64>; 2] {
    let (mut y, mut s) = (vec![0f64; m * n], vec![0f64; m * n]);
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                let bv = if bt { b[j * k + l] } else { b[l * n + j] };
                let p = a[i * k + l] as f64 * bv as f64;
                y[i * n + j] += p;
                s[i * n + j] += p.abs();
            }
        }
    }
    [y, s]
}

/// Every output within `rel * sum |a_i b_i| + abs` of the f64 reference.
pub fn assert_gemm(what: &str, got: &[f32], [want, scale]: &[Vec<f64>; 2], rel: f64, abs: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    let mut worst = 0f64;
    for (i, &g) in got.iter().enumerate() {
        let bound = rel * scale[i] + abs;
        let e = (g as f64 - want[i]).abs();
        assert!(
            e <= bound,
            "{what}: output {i} is {g}, reference {}, error {e:e} > bound {bound:e}",
            want[i]
        );
        worst = worst.max(e / bound);
    }
    eprintln!("{what}: worst error {worst:.3} of the bound");
}

/// Relative error of a strict GEMM output over `k` terms, in units of `sum |a_i b_i|`: each of
/// the k f32 fmas of the ascending sum rounds once (k u, u = 2^-24), and the reference's f64
/// rounding adds nothing visible.
pub fn strict_gemm_rel(k: usize) -> f64 {
    (k + 1) as f64 * 2f64.powi(-24)
}

/// Error of a cooperative-matrix linear output (f16 x f16 products, f32 sums) relative to
/// `sum |x_i w_i|`, beyond the f32 sums' [`strict_gemm_rel`]: x and w are rounded to f16 when
/// staged, each by at most 2^-11 of itself (2^-10 allowed, should a device not round to
/// nearest), so a product is off by at most (1 + 2^-10)^2 - 1 < 2^-9 + 2^-20 of itself.
pub const COOPMAT_F16_INPUT_REL: f64 = 1.0 / 512.0 + 1.0 / 1_048_576.0;

/// Error of a split-precision linear term (`Precision::Split`) relative to |x w|, beyond the
/// f32 sums' [`strict_gemm_rel`]: an operand v is its high part (v with the mantissa cut to 10
/// bits, exact in f16) plus its low part, the rest (below 2^-10 |v|) rounded to f16 (by 2^-11
/// of itself, 2^-10 allowed), so v is carried to within 2^-20 |v| and the product of the two
/// carried operands to within 2^-19 + 2^-40 of |x w|; the dropped low x low product is at most
/// (2^-10 (1 + 2^-10))^2 of it. Operands below 2^-14 add [`COOPMAT_F16_SUBNORMAL_ABS`] a term.
pub const SPLIT_INPUT_REL: f64 = 3.0 / 1_048_576.0 + 1.0 / 268_435_456.0;

/// Absolute error per term from f16's subnormal range: an input below 2^-14 in magnitude is
/// rounded to a multiple of 2^-24, off by up to 2^-25 (2^-24 allowed), times the other
/// factor (at most 1 in these tests).
pub const COOPMAT_F16_SUBNORMAL_ABS: f64 = 1.0 / 16_777_216.0;

/// One weight dtype's bytes to upload, and the f16 or bf16 values the CPU reference reads.
pub type WeightCase = (DType, Vec<u8>, Vec<f16>, Vec<bf16>);

/// Weights `wf` (n x k) as each dtype (q8_0 when k is whole blocks).
pub fn weight_dtypes(wf: &[f32], k: usize) -> Vec<WeightCase> {
    let w16: Vec<f16> = wf.iter().map(|&v| f16::from_f32(v)).collect();
    let wb: Vec<bf16> = wf.iter().map(|&v| bf16::from_f32(v)).collect();
    let mut v = vec![
        (
            DType::F32,
            bytemuck::cast_slice(wf).to_vec(),
            vec![],
            vec![],
        ),
        (DType::F16, bytemuck::cast_slice(&w16).to_vec(), w16, vec![]),
        (DType::BF16, bytemuck::cast_slice(&wb).to_vec(), vec![], wb),
    ];
    if k.is_multiple_of(32) {
        let mut wq = vec![0u8; wf.len() / 32 * Q8_0_BLOCK_BYTES];
        for (blk, out) in wf.chunks(32).zip(wq.chunks_mut(Q8_0_BLOCK_BYTES)) {
            q8_0_quantize_block(blk, out);
        }
        v.push((DType::Q8_0, wq, vec![], vec![]));
    }
    v
}

/// The CPU reference's view of one [`weight_dtypes`] case (`wf`: the f32 weights it came from).
pub fn reference_weights<'a>(wf: &'a [f32], case: &'a WeightCase) -> Weights<'a> {
    let (dt, bytes, w16, wb) = case;
    match dt {
        DType::F32 => Weights::F32(wf),
        DType::F16 => Weights::F16(w16),
        DType::BF16 => Weights::BF16(wb),
        _ => Weights::Q8_0(bytes),
    }
}
