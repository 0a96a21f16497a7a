//! Fast-mode attention on cooperative matrices: the workgroup-scope kernel
//! (`kernels/glsl/attention_cm2.comp`, `VK_NV_cooperative_matrix2`) where the device has it,
//! else the subgroup-scope variants (`kernels/glsl/attention_cm.comp`); both take f16
//! operands with f32 scores, softmax and accumulation. Which one runs, and its specialization
//! constants. Same bindings and push constants as the strict `attention.comp`.

use super::super::context::{Coopmat2, Limits};
use super::super::probe::CoopMatShape;
use super::super::shaders::Shader;
use crate::ops::AttentionParams;

/// One fast kernel: its shader, head dimension, `bq` query rows per workgroup and keys `bkv`
/// at a time. The subgroup-scope variants (`attention_cm_*`: `attention_cm.comp` with the
/// defines of `tools/shaderc`'s variant table) need 32-invocation subgroups and the
/// 16 x 16 x 16 f16 shape (what the shader hard-codes) and run 16 query rows per subgroup;
/// the workgroup-scope kernel takes every size as a specialization constant, and the driver
/// spreads its matrices over `workgroup` invocations. `workgroup` is the dispatch's workgroup
/// size either way (for the subgroup-scope variants 32 per 16 query rows, as a unit test
/// checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FastAttention {
    pub shader: Shader,
    pub head_dim: u32,
    pub bq: u32,
    pub bkv: u32,
    pub workgroup: u32,
}

impl FastAttention {
    /// Shared memory of the subgroup-scope shader's arrays: two pairs of f16 k and v tiles
    /// (rows of head_dim + 8 halves), two tiles of key flags, and per subgroup its f32
    /// scores, f16 probabilities, 32 partial row maxima or sums and 16 row factors. The
    /// workgroup-scope kernel declares none (the driver's staging is its own).
    fn shared_bytes(&self) -> u32 {
        if self.shader == Shader::AttentionCm2 {
            return 0;
        }
        4 * self.bkv * (self.head_dim + 8) * 2
            + 2 * self.bkv * 4
            + self.bq / 16 * (self.bkv * 16 * (4 + 2) + 32 * 4 + 16 * 4)
    }

    /// The specialization constants of a dispatch. Subgroup scope (as the strict shader's,
    /// by `attention::attention_with`): the workgroup size (the variant's compiled-in one) and
    /// VEC_OK, whether bindings start on 16-byte boundaries, so the shader's vec4 views line
    /// up with its scalar ones. Workgroup scope: the workgroup size, bq, bkv and the head
    /// dimension.
    pub fn spec(&self, l: &Limits) -> Vec<u32> {
        match self.shader {
            Shader::AttentionCm2 => vec![self.workgroup, self.bq, self.bkv, self.head_dim],
            _ => vec![
                self.workgroup,
                u32::from(l.min_storage_offset_align.is_multiple_of(16)),
            ],
        }
    }

    fn fits(&self, s: &CoopMatShape, c2: Option<&Coopmat2>, l: &Limits) -> bool {
        match self.shader {
            Shader::AttentionCm2 => c2.is_some_and(|c| self.fits_workgroup_scope(c, l)),
            _ => self.fits_workgroup(l) && l.subgroup_size == 32 && (s.m, s.n, s.k) == (16, 16, 16),
        }
    }

    fn fits_workgroup(&self, l: &Limits) -> bool {
        self.workgroup <= l.max_workgroup_invocations
            && self.workgroup <= l.max_workgroup_size[0]
            && self.shared_bytes() <= l.max_shared_memory
    }

    /// Whether the workgroup-scope kernel fits workgroup-scope matrices `c` (with row
    /// reductions) and the device.
    fn fits_workgroup_scope(&self, c: &Coopmat2, l: &Limits) -> bool {
        self.fits_workgroup(l) && c.reductions && self.workgroup <= c.max_workgroup_size
    }
}

/// The subgroup-scope variants, largest first: 64 queries per workgroup of 4 subgroups, and
/// 32 of 2 for shapes that give too few workgroups with 64. Both take keys 32 at a time: 64
/// would not fit 48 KiB of shared memory with double-buffered tiles.
const FAST_ATTENTION: [FastAttention; 2] = [
    FastAttention {
        shader: Shader::AttentionCmD128Q64Kv32,
        head_dim: 128,
        bq: 64,
        bkv: 32,
        workgroup: 128,
    },
    FastAttention {
        shader: Shader::AttentionCmD128Q32Kv32,
        head_dim: 128,
        bq: 32,
        bkv: 32,
        workgroup: 64,
    },
];

/// Head dimensions the workgroup-scope kernel is given: 64 (MotionBricks' pose transformer) and
/// 128 (Kimodo, LLM2Vec), the ones checked against the rounding bound on the H200
/// (`tests/vulkan.rs`). The shader takes any multiple of 16 (its matrices are sized by
/// specialization constants); others, such as MotionBricks' root transformer's 32, keep the
/// strict shader until they have been checked on such a device.
fn cm2_head_dim(d: usize) -> bool {
    d == 64 || d == 128
}

/// The workgroup-scope tiles (bq, bkv, workgroup), largest first, 4 subgroups each. Measured
/// on the H200 (GPU time, 2026-12-04; BENCHMARKS.md): 64 x 32 wins where it gets more
/// workgroups than the device has SMs (32x202x8x128: 160 us against 188 for 32 x 32;
/// 1x512x32x128: 80 against 141; 16x32x32x128: 26 against 29), 32 x 32 below that (2x202x8x128,
/// 64 workgroups of 64: 25 against 32 us; 3x202x8x128, 96: 31 against 33). Keys 64 at a time
/// and 8 subgroups gained at most 2 us at one of these shapes and lost at others; 16-query
/// blocks lost everywhere.
const CM2_TILES: [(u32, u32, u32); 2] = [(64, 32, 128), (32, 32, 128)];

/// Workgroups of the larger workgroup-scope tile below which the smaller one runs: about one
/// per SM of the H200 (132), whose 64-query workgroups run one at a time per SM (255
/// registers).
const CM2_MIN_WORKGROUPS: usize = 128;

/// Workgroups below which the next smaller query block is taken (as for the linear's
/// cooperative-matrix tiles). Measured on the H200 only at Kimodo's shapes, where the 64-query
/// subgroup-scope variant gets 96 workgroups and wins by far (3x202x8x128: 36.7 us of GPU time
/// against 86.8 us for the 32-query one; 3x254x8x128: 41.5 against 97.1); below the threshold
/// it is a guess.
const FAST_ATTENTION_MIN_WORKGROUPS: usize = 64;

/// `KINEMA_VK_ATTENTION_CM2_TILE=bq,bkv,workgroup`: a workgroup-scope tile to try (for tuning
/// on a new device), or `None` when unset or not three positive numbers with bq and bkv
/// multiples of 16. A tile the device cannot run is ignored like a malformed one ([`select`]).
fn forced_cm2_tile(v: Option<&str>) -> Option<(u32, u32, u32)> {
    let n: Vec<u32> = v?
        .split(',')
        .map(|x| x.trim().parse().ok())
        .collect::<Option<_>>()?;
    match n[..] {
        [bq, bkv, wg] if bq % 16 == 0 && bkv % 16 == 0 && bq > 0 && bkv > 0 && wg > 0 => {
            Some((bq, bkv, wg))
        }
        _ => None,
    }
}

/// The kernel for `p` on a device with cooperative-matrix shape `s` and workgroup-scope
/// matrices `c2`: the workgroup-scope kernel where it fits (the larger of [`CM2_TILES`] when it
/// gives [`CM2_MIN_WORKGROUPS`], else the smaller; `cm2_tile` instead when it fits),
/// else the largest subgroup-scope variant that fits and gives that many workgroups, else the
/// smallest that fits; `None` when none does (another head dimension, subgroup size or
/// shape), and the strict shader runs. `forced` (`KINEMA_VK_ATTENTION_SHADER`, a file stem)
/// picks a kernel when it names one that fits; a name that is not a fast kernel
/// (`attention`, say) asks for the strict shader.
fn select(
    p: &AttentionParams,
    s: &CoopMatShape,
    c2: Option<&Coopmat2>,
    l: &Limits,
    forced: Option<&str>,
    cm2_tile: Option<(u32, u32, u32)>,
) -> Option<FastAttention> {
    let groups = |bq: u32| p.q_len.div_ceil(bq as usize) * p.q_heads * p.batch;
    let pick = |v: &[FastAttention], min: usize| {
        v.iter()
            .copied()
            .find(|v| groups(v.bq) >= min)
            .or(v.last().copied())
    };
    let cm2_of = |(bq, bkv, workgroup): (u32, u32, u32)| FastAttention {
        shader: Shader::AttentionCm2,
        head_dim: p.head_dim as u32,
        bq,
        bkv,
        workgroup,
    };
    let cm2: Vec<FastAttention> = if !cm2_head_dim(p.head_dim) {
        Vec::new()
    } else if let Some(t) = cm2_tile.map(cm2_of).filter(|t| t.fits(s, c2, l)) {
        vec![t]
    } else {
        CM2_TILES
            .into_iter()
            .map(cm2_of)
            .filter(|v| v.fits(s, c2, l))
            .collect()
    };
    let fitting: Vec<FastAttention> = FAST_ATTENTION
        .iter()
        .copied()
        .filter(|v| v.head_dim as usize == p.head_dim && v.fits(s, c2, l))
        .collect();
    if let Some(f) = forced {
        if f == Shader::AttentionCm2.info().name {
            if let Some(v) = pick(&cm2, CM2_MIN_WORKGROUPS) {
                return Some(v);
            }
        } else if !FAST_ATTENTION.iter().any(|v| v.shader.info().name == f) {
            return None;
        } else if let Some(v) = fitting.iter().find(|v| v.shader.info().name == f) {
            return Some(*v);
        }
    }
    pick(&cm2, CM2_MIN_WORKGROUPS).or_else(|| pick(&fitting, FAST_ATTENTION_MIN_WORKGROUPS))
}

/// The fast-mode attention kernel for `p` ([`select`], forced by
/// `KINEMA_VK_ATTENTION_SHADER=<file stem>` and `KINEMA_VK_ATTENTION_CM2_TILE`; empty counts
/// as unset), or `None` for the strict shader.
pub(crate) fn fast_attention_kernel(
    p: &AttentionParams,
    s: &CoopMatShape,
    c2: Option<&Coopmat2>,
    l: &Limits,
) -> Option<FastAttention> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let forced = var("KINEMA_VK_ATTENTION_SHADER");
    let tile = forced_cm2_tile(var("KINEMA_VK_ATTENTION_CM2_TILE").as_deref());
    select(p, s, c2, l, forced.as_deref(), tile)
}

/// Head dimensions split precision's attention is given: MotionBricks' 32 and 64, Kimodo's and
/// LLM2Vec's 128, each checked against the f64 bound on the H200 (`tests/vulkan.rs`).
fn split_head_dim(d: usize) -> bool {
    matches!(d, 32 | 64 | 128)
}

/// Split precision's attention tile (bq, bkv, workgroup): 32 queries, keys 32 at a time, 128
/// invocations (the split kernel holds two output accumulators and both parts of q, k, p and
/// v, so the 64-query tile of fast mode would not fit the registers).
const SPLIT_TILE: (u32, u32, u32) = (32, 32, 128);

/// The split-precision attention kernel for `p` on a device with workgroup-scope matrices
/// `c2` (`attention_cm2.comp` with `SPLIT` 1; its constants from [`split_spec`]): the
/// [`SPLIT_TILE`] (or `KINEMA_VK_ATTENTION_CM2_TILE` where the device fits it) for the head
/// dimensions of [`split_head_dim`]; `None` for the strict shader.
pub(crate) fn split_attention_kernel(
    p: &AttentionParams,
    c2: &Coopmat2,
    l: &Limits,
) -> Option<FastAttention> {
    let var = std::env::var("KINEMA_VK_ATTENTION_CM2_TILE").ok();
    select_split(p, c2, l, forced_cm2_tile(var.as_deref()))
}

fn select_split(
    p: &AttentionParams,
    c2: &Coopmat2,
    l: &Limits,
    forced: Option<(u32, u32, u32)>,
) -> Option<FastAttention> {
    if !split_head_dim(p.head_dim) {
        return None;
    }
    let of = |(bq, bkv, workgroup)| FastAttention {
        shader: Shader::AttentionCm2,
        head_dim: p.head_dim as u32,
        bq,
        bkv,
        workgroup,
    };
    forced
        .map(of)
        .filter(|v| v.fits_workgroup_scope(c2, l))
        .or_else(|| Some(of(SPLIT_TILE)).filter(|v| v.fits_workgroup_scope(c2, l)))
}

/// The specialization constants of a split-precision dispatch of `f` (from
/// [`split_attention_kernel`]): the workgroup-scope kernel's, and `SPLIT` 1.
pub(crate) fn split_spec(f: &FastAttention, l: &Limits) -> Vec<u32> {
    let mut spec = f.spec(l);
    spec.push(1);
    spec
}

#[cfg(test)]
mod tests {
    use super::super::{test_h200 as h200, test_h200_coopmat2 as h200_coopmat2};
    use super::*;
    use crate::ops::MaskKind;

    fn params(batch: usize, q_len: usize, q_heads: usize, head_dim: usize) -> AttentionParams {
        AttentionParams {
            batch,
            q_len,
            kv_len: q_len,
            q_heads,
            kv_heads: q_heads,
            head_dim,
            scale: 1.0,
            mask: MaskKind::None,
            q_row_stride: q_heads * head_dim,
            kv_row_stride: q_heads * head_dim,
        }
    }

    #[test]
    fn variants_follow_the_device_and_the_shape() {
        let (s, l) = (CoopMatShape::f16_16x16x16(), h200());
        let pick = |p: &AttentionParams, l: &Limits, forced| select(p, &s, None, l, forced, None);
        // Kimodo's shape: 4 query blocks of 64 x 8 heads x 3 rows = 96 workgroups.
        let kimodo = params(3, 202, 8, 128);
        assert_eq!(pick(&kimodo, &l, None), Some(FAST_ATTENTION[0]));
        // One short sequence: too few workgroups for 64-query blocks.
        assert_eq!(
            pick(&params(1, 7, 2, 128), &l, None),
            Some(FAST_ATTENTION[1])
        );
        // Only head dimension 128 is compiled.
        assert_eq!(pick(&params(3, 202, 8, 64), &l, None), None);
        // Another subgroup size or shape, or too little shared memory: the strict shader.
        let mut wave64 = h200();
        wave64.subgroup_size = 64;
        assert_eq!(pick(&kimodo, &wave64, None), None);
        let mut lavapipe = h200();
        lavapipe.subgroup_size = 8;
        lavapipe.max_shared_memory = 32768;
        assert_eq!(pick(&kimodo, &lavapipe, None), None);
        let s16x8 = CoopMatShape { n: 8, ..s };
        assert_eq!(select(&kimodo, &s16x8, None, &l, None, None), None);
        // 64 invocations per workgroup at most: the 2-subgroup variant.
        let mut small = h200();
        small.max_workgroup_invocations = 64;
        assert_eq!(pick(&kimodo, &small, None), Some(FAST_ATTENTION[1]));
        // 44 KiB of shared memory holds the 2-subgroup variant only.
        let mut s44 = h200();
        s44.max_shared_memory = 44 * 1024;
        assert_eq!(pick(&kimodo, &s44, None), Some(FAST_ATTENTION[1]));
    }

    #[test]
    fn a_forced_shader_wins_when_it_fits() {
        let (s, l) = (CoopMatShape::f16_16x16x16(), h200());
        let kimodo = params(3, 202, 8, 128);
        let q32 = FAST_ATTENTION[1];
        let name = q32.shader.info().name;
        assert_eq!(select(&kimodo, &s, None, &l, Some(name), None), Some(q32));
        // The strict shader's name (or any other) asks for the strict path.
        assert_eq!(select(&kimodo, &s, None, &l, Some("attention"), None), None);
        // A variant that does not fit falls back to the default choice.
        let mut small = h200();
        small.max_workgroup_invocations = 64;
        let q64 = FAST_ATTENTION[0].shader.info().name;
        assert_eq!(
            select(&kimodo, &s, None, &small, Some(q64), None),
            Some(q32)
        );
        assert_eq!(
            select(&params(1, 8, 1, 64), &s, None, &l, Some(q64), None),
            None
        );
    }

    #[test]
    fn workgroup_scope_kernel_where_the_device_has_reductions() {
        let (s, l) = (CoopMatShape::f16_16x16x16(), h200());
        let c2 = h200_coopmat2();
        let sel = |p: &AttentionParams, c2: Option<&Coopmat2>| select(p, &s, c2, &l, None, None);
        let tile = |v: FastAttention| (v.shader, v.bq, v.bkv, v.workgroup);
        // Kimodo with 2 rows: 64 workgroups of 64 queries, fewer than one per SM.
        let k2 = params(2, 202, 8, 128);
        let v = sel(&k2, Some(&c2)).unwrap();
        assert_eq!(tile(v), (Shader::AttentionCm2, 32, 32, 128));
        assert_eq!(v.spec(&l), vec![128, 32, 32, 128]);
        // 32 rows: 1024 workgroups of 64; LLM2Vec's 512 tokens x 32 heads: 256.
        for p in [params(32, 202, 8, 128), params(1, 512, 32, 128)] {
            assert_eq!(
                tile(sel(&p, Some(&c2)).unwrap()),
                (Shader::AttentionCm2, 64, 32, 128)
            );
        }
        // Head dimension 64 too (no subgroup-scope variant has it); not the unchecked ones.
        let d64 = sel(&params(3, 202, 8, 64), Some(&c2));
        assert_eq!(d64.map(|v| v.head_dim), Some(64));
        for d in [32, 72, 80, 256] {
            assert_eq!(sel(&params(3, 202, 8, d), Some(&c2)), None);
        }
        // Without row reductions, or with workgroup-scope matrices for fewer invocations, the
        // subgroup-scope variants run.
        let no_reductions = Coopmat2 {
            reductions: false,
            ..c2
        };
        let narrow = Coopmat2 {
            max_workgroup_size: 64,
            ..c2
        };
        for c in [None, Some(&no_reductions), Some(&narrow)] {
            assert_eq!(sel(&k2, c), Some(FAST_ATTENTION[0]));
        }
        // A subgroup-scope variant named in KINEMA_VK_ATTENTION_SHADER wins; a forced tile
        // runs when it fits, and the table's tile otherwise.
        let q64 = FAST_ATTENTION[0].shader.info().name;
        assert_eq!(
            select(&k2, &s, Some(&c2), &l, Some(q64), None),
            Some(FAST_ATTENTION[0])
        );
        let forced = |t| select(&k2, &s, Some(&c2), &l, None, Some(t)).map(tile);
        assert_eq!(
            forced((64, 64, 256)),
            Some((Shader::AttentionCm2, 64, 64, 256))
        );
        assert_eq!(
            forced((64, 32, 512)),
            Some((Shader::AttentionCm2, 32, 32, 128))
        );
        assert_eq!(forced_cm2_tile(Some("64, 32,128")), Some((64, 32, 128)));
        for bad in ["64,24,128", "64,32", "0,32,128", "64,32,x", ""] {
            assert_eq!(forced_cm2_tile(Some(bad)), None, "{bad}");
        }
        assert_eq!(forced_cm2_tile(None), None);
    }

    /// The table agrees with the variants' defines (`tools/shaderc`'s variant table) and with
    /// the shared memory of the compiled modules (48128 and 41600 bytes: read back from the
    /// SPIR-V's workgroup arrays when the variants were written).
    #[test]
    fn variants_match_their_defines() {
        let l = h200();
        for v in FAST_ATTENTION {
            let name = v.shader.info().name;
            let variant = super::super::shader_variants::VARIANTS
                .iter()
                .find(|t| t.name == name)
                .unwrap_or_else(|| panic!("{name} is not in the variant table"));
            assert_eq!(variant.source, "attention_cm.comp");
            assert_eq!(
                v.workgroup,
                v.bq / 16 * 32,
                "{name}: one subgroup per 16 rows"
            );
            for (define, value) in [("HD", v.head_dim), ("BQ", v.bq), ("BKV", v.bkv)] {
                let want = value.to_string();
                assert_eq!(
                    variant.define(define),
                    Some(want.as_str()),
                    "{name}: {define}"
                );
            }
            assert!(
                v.fits(&CoopMatShape::f16_16x16x16(), None, &l),
                "{v:?} must fit the H200"
            );
        }
        assert_eq!(FAST_ATTENTION[0].shared_bytes(), 48128);
        assert_eq!(FAST_ATTENTION[1].shared_bytes(), 41600);
    }

    #[test]
    fn split_kernel_for_checked_head_dims_with_reductions() {
        let l = h200();
        let c2 = h200_coopmat2();
        let tile = |v: FastAttention| (v.shader, v.head_dim, v.bq, v.bkv, v.workgroup);
        for d in [32, 64, 128] {
            let v = select_split(&params(2, 202, 8, d), &c2, &l, None).unwrap();
            assert_eq!(tile(v), (Shader::AttentionCm2, d as u32, 32, 32, 128));
            assert_eq!(split_spec(&v, &l), vec![128, 32, 32, d as u32, 1]);
        }
        for d in [16, 48, 80, 256] {
            assert_eq!(select_split(&params(2, 202, 8, d), &c2, &l, None), None);
        }
        // A forced tile the device fits wins; one it does not is ignored.
        let p = params(2, 202, 8, 128);
        let v = select_split(&p, &c2, &l, Some((16, 32, 64))).unwrap();
        assert_eq!((v.bq, v.bkv, v.workgroup), (16, 32, 64));
        let v = select_split(&p, &c2, &l, Some((64, 32, 512))).unwrap();
        assert_eq!((v.bq, v.bkv, v.workgroup), (32, 32, 128));
        // Without row reductions, or with fewer invocations allowed: the strict shader.
        for c in [
            Coopmat2 {
                reductions: false,
                ..c2
            },
            Coopmat2 {
                max_workgroup_size: 64,
                ..c2
            },
        ] {
            assert_eq!(select_split(&p, &c, &l, None), None);
        }
    }
}
