//! Strided copy (slice, transpose, concat, copy) for 2- and 4-byte element types.
//! The innermost run, when contiguous on both sides, is a `copy_from_slice` (memcpy).

use crate::ops::CopyParams;

/// Copy every element of `p.shape` from `src` to `dst` through their strides. `T` is the
/// element's bit pattern (u16 for f16/bf16, u32 for f32/i32/u32), so any dtype copies
/// exactly.
pub fn copy_strided<T: Copy>(p: &CopyParams, src: &[T], dst: &mut [T]) {
    let rank = p.shape.len();
    if p.shape.contains(&0) {
        return;
    }
    if rank == 0 {
        dst[p.dst_offset] = src[p.src_offset];
        return;
    }
    let inner = p.shape[rank - 1];
    let (ss, ds) = (p.src_strides[rank - 1], p.dst_strides[rank - 1]);
    let outer: usize = p.shape[..rank - 1].iter().product();
    let mut idx = vec![0usize; rank - 1];
    for _ in 0..outer {
        let mut so = p.src_offset;
        let mut dst_o = p.dst_offset;
        for (d, &i) in idx.iter().enumerate() {
            so += i * p.src_strides[d];
            dst_o += i * p.dst_strides[d];
        }
        if ss == 1 && ds == 1 {
            dst[dst_o..dst_o + inner].copy_from_slice(&src[so..so + inner]);
        } else {
            for i in 0..inner {
                dst[dst_o + i * ds] = src[so + i * ss];
            }
        }
        for d in (0..rank - 1).rev() {
            idx[d] += 1;
            if idx[d] < p.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}
