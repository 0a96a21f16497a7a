//! Element types. `Q8_0` is the block-quantised weight type of GGML: blocks of 32 values
//! stored as one f16 scale `d` followed by 32 signed bytes `q`, value = `d * q`.

use half::f16;

/// Values in one q8_0 block.
pub const Q8_0_BLOCK: usize = 32;
/// Bytes in one q8_0 block: a 2-byte f16 scale and 32 i8 quants.
pub const Q8_0_BLOCK_BYTES: usize = 34;

/// The element types tensors can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    U32,
    /// Block-quantised: 32 values per 34-byte block (f16 scale + 32 x i8).
    Q8_0,
}

impl DType {
    pub const ALL: [DType; 6] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U32,
        DType::Q8_0,
    ];

    /// Lower-case name as used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Q8_0 => "q8_0",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Elements per storage block (1 for plain types, 32 for q8_0).
    pub fn block_elems(self) -> usize {
        match self {
            DType::Q8_0 => Q8_0_BLOCK,
            _ => 1,
        }
    }

    /// Bytes per storage block.
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q8_0 => Q8_0_BLOCK_BYTES,
        }
    }

    /// Required alignment of the start of a slice of this type when read in place.
    pub fn align(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::Q8_0 => 2,
        }
    }

    /// Bytes needed for `elems` elements, or `None` when `elems` is not a whole number of
    /// blocks or the size overflows.
    pub fn bytes_for(self, elems: usize) -> Option<usize> {
        let be = self.block_elems();
        if !elems.is_multiple_of(be) {
            return None;
        }
        (elems / be).checked_mul(self.block_bytes())
    }

    /// True for the types a floating-point weight can be stored in.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Quantise 32 values to one q8_0 block, as GGML's reference `quantize_row_q8_0_ref`:
/// `d = max|x| / 127`, `q = round(x / d)` (ties away from zero).
pub fn q8_0_quantize_block(x: &[f32], out: &mut [u8]) {
    assert_eq!(x.len(), Q8_0_BLOCK, "a q8_0 block holds 32 values");
    assert_eq!(out.len(), Q8_0_BLOCK_BYTES, "a q8_0 block is 34 bytes");
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (o, v) in out[2..].iter_mut().zip(x) {
        *o = ((v * id).round() as i8) as u8;
    }
}

/// Dequantise one q8_0 block into 32 values.
pub fn q8_0_dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
    for (o, q) in out.iter_mut().zip(&block[2..Q8_0_BLOCK_BYTES]) {
        *o = d * (*q as i8) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(DType::F32.bytes_for(3), Some(12));
        assert_eq!(DType::BF16.bytes_for(3), Some(6));
        assert_eq!(DType::Q8_0.bytes_for(64), Some(68));
        assert_eq!(DType::Q8_0.bytes_for(33), None);
        assert_eq!(DType::F32.bytes_for(usize::MAX), None);
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
    }

    #[test]
    fn q8_0_round_trip_error_is_half_a_step() {
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 15.3) * 0.37).collect();
        let mut b = [0u8; Q8_0_BLOCK_BYTES];
        q8_0_quantize_block(&x, &mut b);
        let mut y = [0f32; 32];
        q8_0_dequantize_block(&b, &mut y);
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        // f16 rounding of d adds at most 2^-11 relative on top of half a quantisation step.
        let step = amax / 127.0;
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= 0.5 * step + amax * 1e-3, "{a} vs {b}");
        }
    }
}
