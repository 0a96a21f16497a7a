//! Shared helpers for integration tests: seeded data, backend upload/download, error metrics.
#![allow(dead_code)]

pub mod gemm;

use kinema::backend::{Backend, BufRef};
use kinema::tensor::DType;

/// A small deterministic generator (SplitMix64) for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / 16_777_216.0)
    }
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

pub fn upload<B: Backend>(b: &B, dtype: DType, bytes: &[u8], len: usize) -> BufRef<B::Buffer> {
    let buf = b.alloc(dtype, len).expect("alloc");
    let r = BufRef::new(buf, dtype, len);
    b.write(&r, bytes).expect("write");
    r
}

pub fn upload_f32<B: Backend>(b: &B, v: &[f32]) -> BufRef<B::Buffer> {
    upload(b, DType::F32, bytemuck::cast_slice(v), v.len())
}
pub fn upload_u32<B: Backend>(b: &B, v: &[u32]) -> BufRef<B::Buffer> {
    upload(b, DType::U32, bytemuck::cast_slice(v), v.len())
}
pub fn upload_i32<B: Backend>(b: &B, v: &[i32]) -> BufRef<B::Buffer> {
    upload(b, DType::I32, bytemuck::cast_slice(v), v.len())
}

pub fn alloc<B: Backend>(b: &B, dtype: DType, len: usize) -> BufRef<B::Buffer> {
    BufRef::new(b.alloc(dtype, len).expect("alloc"), dtype, len)
}

pub fn download_f32<B: Backend>(b: &B, r: &BufRef<B::Buffer>) -> Vec<f32> {
    let mut out = vec![0u8; r.len * 4];
    b.read(r, &mut out).expect("read");
    bytemuck::pod_collect_to_vec(&out)
}
pub fn download_u32<B: Backend>(b: &B, r: &BufRef<B::Buffer>) -> Vec<u32> {
    let mut out = vec![0u8; r.len * 4];
    b.read(r, &mut out).expect("read");
    bytemuck::pod_collect_to_vec(&out)
}

/// Maximum absolute difference and relative L2 error of `got` against `want`.
/// `a` and `b` hold the same f32 bit patterns (NaN payloads and the sign of zero included).
#[allow(dead_code)]
pub fn assert_same_bits(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}");
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!("{what}: element {i} differs: {} vs {}", a[i], b[i]);
    }
}

pub fn errors(got: &[f32], want: &[f32]) -> (f32, f32) {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let mut max_abs = 0f32;
    let (mut num, mut den) = (0f64, 0f64);
    for (g, w) in got.iter().zip(want) {
        assert!(
            g.is_finite() || !w.is_finite(),
            "non-finite {g} where the reference is {w}"
        );
        max_abs = max_abs.max((g - w).abs());
        num += ((g - w) as f64).powi(2);
        den += (*w as f64).powi(2);
    }
    (max_abs, (num / den.max(1e-300)).sqrt() as f32)
}

/// Assert `got` is within `max_abs` everywhere and `rel_l2` overall.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], max_abs: f32, rel_l2: f32) {
    let (a, r) = errors(got, want);
    assert!(
        a <= max_abs && r <= rel_l2,
        "{what}: max_abs {a:e} (bound {max_abs:e}), rel_l2 {r:e} (bound {rel_l2:e})"
    );
}
