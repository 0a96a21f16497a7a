//! llama.cpp block formats that kinema reads by dequantising to f32 when a tensor is loaded
//! (its kernels multiply f32, f16, bf16 and q8_0 weights only). Layouts from ggml's
//! `ggml-common.h` (`block_q4_0`, `block_q4_1`) and formulas from `ggml-quants.c`
//! (`dequantize_row_q4_0`, `dequantize_row_q4_1`): a block covers 32 consecutive values of a
//! row; byte `j` of `qs` holds value `j` in its low nibble and value `j + 16` in its high one.
//!
//! Dequantisation is exact: each value is `q * d (+ m)` with `d` and `m` f16 and `q` a 4-bit
//! integer, computed in f32 as ggml does (one product, one sum, each rounded once).

use half::f16;

use crate::error::{Error, Result};

/// Values per block of every format here.
pub const QK4: usize = 32;

/// A llama.cpp block format read by dequantising at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockQuant {
    /// `{ f16 d; u8 qs[16] }`: `x = (q - 8) * d` (ggml type 2).
    Q4_0,
    /// `{ f16 d; f16 m; u8 qs[16] }`: `x = q * d + m` (ggml type 3).
    Q4_1,
}

impl BlockQuant {
    /// The format of a ggml type id, if kinema dequantises it.
    pub fn from_ggml(id: u32) -> Option<BlockQuant> {
        match id {
            2 => Some(BlockQuant::Q4_0),
            3 => Some(BlockQuant::Q4_1),
            _ => None,
        }
    }

    /// llama.cpp's name of the format.
    pub fn name(self) -> &'static str {
        match self {
            BlockQuant::Q4_0 => "Q4_0",
            BlockQuant::Q4_1 => "Q4_1",
        }
    }

    /// Values per block.
    pub fn block_elems(self) -> usize {
        QK4
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            BlockQuant::Q4_0 => 2 + QK4 / 2,
            BlockQuant::Q4_1 => 4 + QK4 / 2,
        }
    }

    /// Bytes of `elems` values, or `None` when they are not whole blocks or overflow.
    pub fn bytes_for(self, elems: usize) -> Option<usize> {
        if !elems.is_multiple_of(self.block_elems()) {
            return None;
        }
        (elems / self.block_elems()).checked_mul(self.block_bytes())
    }

    /// The f32 values of whole blocks of this format.
    pub fn dequantize(self, bytes: &[u8]) -> Result<Vec<f32>> {
        let bb = self.block_bytes();
        if !bytes.len().is_multiple_of(bb) {
            return Err(Error::Shape(format!(
                "{} data of {} bytes is not a whole number of {bb}-byte blocks",
                self.name(),
                bytes.len()
            )));
        }
        let mut out = vec![0f32; bytes.len() / bb * QK4];
        for (blk, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(QK4)) {
            let h = |i: usize| f16::from_le_bytes([blk[i], blk[i + 1]]).to_f32();
            let (lo, hi) = o.split_at_mut(QK4 / 2);
            match self {
                BlockQuant::Q4_0 => {
                    let d = h(0);
                    for (j, &q) in blk[2..].iter().enumerate() {
                        lo[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
                        hi[j] = ((q >> 4) as i32 - 8) as f32 * d;
                    }
                }
                BlockQuant::Q4_1 => {
                    let (d, m) = (h(0), h(2));
                    for (j, &q) in blk[4..].iter().enumerate() {
                        lo[j] = (q & 0x0f) as f32 * d + m;
                        hi[j] = (q >> 4) as f32 * d + m;
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(x: f32) -> [u8; 2] {
        f16::from_f32(x).to_le_bytes()
    }

    #[test]
    fn nibbles_hold_values_j_and_j_plus_16() {
        // Q4_0: d = 0.5; byte j = (hi j+1 mod 16) << 4 | (lo j).
        let mut b = half(0.5).to_vec();
        b.extend((0..16u8).map(|j| ((j + 1) % 16) << 4 | j));
        let v = BlockQuant::Q4_0.dequantize(&b).unwrap();
        for j in 0..16 {
            assert_eq!(v[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(v[j + 16], (((j + 1) % 16) as f32 - 8.0) * 0.5);
        }
        // Q4_1: d = 0.25, m = -1.
        let mut b = half(0.25).to_vec();
        b.extend(half(-1.0));
        b.extend((0..16u8).map(|j| (15 - j) << 4 | j));
        let v = BlockQuant::Q4_1.dequantize(&b).unwrap();
        for j in 0..16 {
            assert_eq!(v[j], j as f32 * 0.25 - 1.0);
            assert_eq!(v[j + 16], (15 - j) as f32 * 0.25 - 1.0);
        }
        assert_eq!(BlockQuant::Q4_1.bytes_for(64), Some(40));
        assert_eq!(BlockQuant::Q4_0.bytes_for(33), None);
        assert!(BlockQuant::Q4_1.dequantize(&b[..19]).is_err());
    }
}
