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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::MAX_RANK;
    use proptest::prelude::*;

    /// A copy of `shape` out of a bigger source tensor stored in a permuted axis order (a
    /// transposed slice) into a bigger row-major destination at an offset (a concat).
    #[derive(Debug, Clone)]
    struct Case {
        p: CopyParams,
        src_len: usize,
        dst_len: usize,
    }

    /// Row-major strides of `dims`.
    fn strides(dims: &[usize]) -> Vec<usize> {
        let mut s = vec![1; dims.len()];
        for d in (0..dims.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * dims[d + 1];
        }
        s
    }

    fn case() -> impl Strategy<Value = Case> {
        (0..=MAX_RANK)
            .prop_flat_map(|rank| {
                (
                    proptest::collection::vec(
                        (
                            prop_oneof![9 => 1..=4usize, 1 => Just(0)],
                            0..=2usize,
                            0..=2usize,
                        ),
                        rank,
                    ),
                    Just((0..rank).collect::<Vec<_>>()).prop_shuffle(),
                    any::<u64>(),
                )
            })
            .prop_map(|(dims, perm, seed)| {
                let shape: Vec<usize> = dims.iter().map(|d| d.0).collect();
                // Source: a [shape + extra] tensor whose memory order is `perm` of the axes.
                let src_dims: Vec<usize> = dims.iter().map(|d| d.0 + d.1).collect();
                let mem_dims: Vec<usize> = perm.iter().map(|&a| src_dims[a]).collect();
                let mem_strides = strides(&mem_dims);
                let mut src_strides = vec![0; shape.len()];
                for (m, &a) in perm.iter().enumerate() {
                    src_strides[a] = mem_strides[m];
                }
                // Destination: a row-major [shape + extra] tensor.
                let dst_dims: Vec<usize> = dims.iter().map(|d| d.0 + d.2).collect();
                let dst_strides = strides(&dst_dims);
                // The slice start / concat position: somewhere inside the extra room.
                let start = |a: usize, room: usize| {
                    (crate::rng::splitmix64(seed, a as u64) as usize) % (room + 1)
                };
                let src_offset = (0..shape.len())
                    .map(|a| start(a, dims[a].1) * src_strides[a])
                    .sum();
                let dst_offset = (0..shape.len())
                    .map(|a| start(a + 8, dims[a].2) * dst_strides[a])
                    .sum();
                Case {
                    src_len: src_dims.iter().product(),
                    dst_len: dst_dims.iter().product(),
                    p: CopyParams {
                        shape,
                        src_strides,
                        src_offset,
                        dst_strides,
                        dst_offset,
                    },
                }
            })
    }

    /// The oracle: visit every index of the shape, one element at a time.
    fn naive<T: Copy>(p: &CopyParams, src: &[T], dst: &mut [T]) {
        let n: usize = p.shape.iter().product();
        for flat in 0..n {
            let (mut rem, mut so, mut d_o) = (flat, p.src_offset, p.dst_offset);
            for a in (0..p.shape.len()).rev() {
                let i = rem % p.shape[a];
                rem /= p.shape[a];
                so += i * p.src_strides[a];
                d_o += i * p.dst_strides[a];
            }
            dst[d_o] = src[so];
        }
    }

    fn check<T: Copy + PartialEq + std::fmt::Debug>(c: &Case, value: impl Fn(usize) -> T, fill: T) {
        let src: Vec<T> = (0..c.src_len).map(&value).collect();
        let mut want = vec![fill; c.dst_len];
        naive(&c.p, &src, &mut want);
        let mut got = vec![fill; c.dst_len];
        copy_strided(&c.p, &src, &mut got);
        assert_eq!(got, want, "{:?}", c.p);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn copy_strided_matches_an_index_by_index_copy(c in case()) {
            // Distinct values, so a misplaced element shows; the destination's untouched
            // elements must keep the fill.
            check::<u32>(&c, |i| i as u32 + 1, 0);
            check::<u16>(&c, |i| (i % 65_521) as u16 + 1, 0);
        }
    }

    #[test]
    fn rank_zero_copies_one_element_and_empty_shapes_copy_nothing() {
        let p = CopyParams {
            shape: vec![],
            src_strides: vec![],
            src_offset: 2,
            dst_strides: vec![],
            dst_offset: 1,
        };
        let mut dst = [0u32; 3];
        copy_strided(&p, &[7, 8, 9], &mut dst);
        assert_eq!(dst, [0, 9, 0]);
        let p = CopyParams {
            shape: vec![3, 0],
            src_strides: vec![1, 3],
            src_offset: 0,
            dst_strides: vec![1, 1],
            dst_offset: 0,
        };
        copy_strided(&p, &[1u32, 2, 3], &mut dst);
        assert_eq!(dst, [0, 9, 0]);
    }
}
