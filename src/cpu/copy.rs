//! Strided copy (slice, transpose, concat, copy) for 2- and 4-byte element types.
//! The innermost run, when contiguous on both sides, is a `copy_from_slice` (memcpy).

use super::Cx;
use crate::ops::CopyParams;

/// Elements per parallel task of a dense copy.
const CHUNK: usize = 1 << 18;

/// Copy with the backend's pool: a dense copy (both sides contiguous in the same order) is a
/// parallel memcpy; anything else goes through [`copy_strided`].
pub fn copy<T: Copy + Send + Sync>(cx: &Cx, p: &CopyParams, src: &[T], dst: &mut [T]) {
    let dense = |strides: &[usize]| {
        let mut acc = 1;
        p.shape.iter().zip(strides).rev().all(|(&n, &s)| {
            let ok = n == 1 || s == acc;
            acc *= n;
            ok
        })
    };
    if dense(&p.src_strides) && dense(&p.dst_strides) {
        let n: usize = p.shape.iter().product();
        let src = &src[p.src_offset..p.src_offset + n];
        let dst = &mut dst[p.dst_offset..p.dst_offset + n];
        cx.pool.par_chunks_mut(dst, CHUNK, |i, out| {
            out.copy_from_slice(&src[i * CHUNK..i * CHUNK + out.len()])
        });
    } else {
        copy_strided(p, src, dst);
    }
}

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
