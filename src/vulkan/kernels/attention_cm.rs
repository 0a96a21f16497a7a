//! Fast-mode attention on cooperative matrices (`kernels/glsl/attention_cm.comp`: f16
//! operands, f32 scores, softmax and accumulation): the compiled variants, which one runs, and
//! its dispatch. Same bindings and push constants as the strict `attention.comp`.

use super::super::context::Limits;
use super::super::probe::CoopMatShape;
use super::super::shaders::Shader;
use crate::ops::AttentionParams;

/// One compiled variant (`attention_cm_*`: `attention_cm.comp` with the defines of
/// `tools/shaderc`'s variant table): its head dimension, `bq` query rows per workgroup (16 per
/// subgroup) and keys `bkv` at a time. They need 32-invocation subgroups and the 16 x 16 x 16
/// f16 shape (what the shader hard-codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FastAttention {
    pub shader: Shader,
    pub head_dim: u32,
    pub bq: u32,
    pub bkv: u32,
}

impl FastAttention {
    fn invocations(&self) -> u32 {
        self.bq / 16 * 32
    }

    /// Shared memory of the shader's arrays: two pairs of f16 k and v tiles (rows of
    /// head_dim + 8 halves), two tiles of key flags, and per subgroup its f32 scores, f16
    /// probabilities, 32 partial row maxima or sums and 16 row factors.
    fn shared_bytes(&self) -> u32 {
        4 * self.bkv * (self.head_dim + 8) * 2
            + 2 * self.bkv * 4
            + self.bq / 16 * (self.bkv * 16 * (4 + 2) + 32 * 4 + 16 * 4)
    }

    /// The specialization constants of a dispatch (as the strict shader's, by
    /// `attention::attention_with`): the workgroup size (the variant's compiled-in one) and
    /// VEC_OK, whether bindings start on 16-byte boundaries, so the shader's vec4 views line
    /// up with its scalar ones.
    pub fn spec(&self, l: &Limits) -> [u32; 2] {
        [
            self.invocations(),
            u32::from(l.min_storage_offset_align.is_multiple_of(16)),
        ]
    }

    fn fits(&self, s: &CoopMatShape, l: &Limits) -> bool {
        l.subgroup_size == 32
            && (s.m, s.n, s.k) == (16, 16, 16)
            && self.invocations() <= l.max_workgroup_invocations
            && self.invocations() <= l.max_workgroup_size[0]
            && self.shared_bytes() <= l.max_shared_memory
    }
}

/// The variants, largest first: 64 queries per workgroup of 4 subgroups, and 32 of 2 for
/// shapes that give too few workgroups with 64. Both take keys 32 at a time: 64 would not fit
/// 48 KiB of shared memory with double-buffered tiles.
const FAST_ATTENTION: [FastAttention; 2] = [
    FastAttention {
        shader: Shader::AttentionCmD128Q64Kv32,
        head_dim: 128,
        bq: 64,
        bkv: 32,
    },
    FastAttention {
        shader: Shader::AttentionCmD128Q32Kv32,
        head_dim: 128,
        bq: 32,
        bkv: 32,
    },
];

/// Workgroups below which the next smaller query block is taken (as for the linear's
/// cooperative-matrix tiles). Measured on the H200 only at Kimodo's shapes, where the 64-query
/// variant gets 96 workgroups and wins by far (3x202x8x128: 36.7 us of GPU time against 86.8
/// us for the 32-query one; 3x254x8x128: 41.5 against 97.1); below the threshold it is a
/// guess.
const FAST_ATTENTION_MIN_WORKGROUPS: usize = 64;

/// The variant for `p` on a device with cooperative-matrix shape `s`: the largest that fits
/// and gives [`FAST_ATTENTION_MIN_WORKGROUPS`], else the smallest that fits; `None` when none
/// does (another head dimension, subgroup size or shape), and the strict shader runs.
/// `forced` (`KINEMA_VK_ATTENTION_SHADER`, a file stem) picks a variant when it names one
/// that fits; a name that is not a fast variant (`attention`, say) asks for the strict
/// shader.
fn select(
    p: &AttentionParams,
    s: &CoopMatShape,
    l: &Limits,
    forced: Option<&str>,
) -> Option<FastAttention> {
    let fitting: Vec<FastAttention> = FAST_ATTENTION
        .iter()
        .copied()
        .filter(|v| v.head_dim as usize == p.head_dim && v.fits(s, l))
        .collect();
    if let Some(f) = forced {
        if !FAST_ATTENTION.iter().any(|v| v.shader.info().name == f) {
            return None;
        }
        if let Some(v) = fitting.iter().find(|v| v.shader.info().name == f) {
            return Some(*v);
        }
    }
    let groups = |v: &FastAttention| p.q_len.div_ceil(v.bq as usize) * p.q_heads * p.batch;
    fitting
        .iter()
        .copied()
        .find(|v| groups(v) >= FAST_ATTENTION_MIN_WORKGROUPS)
        .or(fitting.last().copied())
}

/// The fast-mode attention variant for `p` ([`select`], forced by
/// `KINEMA_VK_ATTENTION_SHADER=<file stem>`; empty counts as unset), or `None` for the strict
/// shader.
pub(crate) fn fast_attention_kernel(
    p: &AttentionParams,
    s: &CoopMatShape,
    l: &Limits,
) -> Option<FastAttention> {
    let forced = std::env::var("KINEMA_VK_ATTENTION_SHADER")
        .ok()
        .filter(|v| !v.is_empty());
    select(p, s, l, forced.as_deref())
}

#[cfg(test)]
mod tests {
    use super::super::test_h200 as h200;
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
        let pick = |p: &AttentionParams, l: &Limits, forced| select(p, &s, l, forced);
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
        assert_eq!(select(&kimodo, &s16x8, &l, None), None);
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
        assert_eq!(select(&kimodo, &s, &l, Some(name)), Some(q32));
        // The strict shader's name (or any other) asks for the strict path.
        assert_eq!(select(&kimodo, &s, &l, Some("attention")), None);
        // A variant that does not fit falls back to the default choice.
        let mut small = h200();
        small.max_workgroup_invocations = 64;
        let q64 = FAST_ATTENTION[0].shader.info().name;
        assert_eq!(select(&kimodo, &s, &small, Some(q64)), Some(q32));
        assert_eq!(select(&params(1, 8, 1, 64), &s, &l, Some(q64)), None);
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
            for (define, value) in [("HD", v.head_dim), ("BQ", v.bq), ("BKV", v.bkv)] {
                let want = value.to_string();
                assert_eq!(
                    variant.define(define),
                    Some(want.as_str()),
                    "{name}: {define}"
                );
            }
            assert!(
                v.fits(&CoopMatShape::f16_16x16x16(), &l),
                "{v:?} must fit the H200"
            );
        }
        assert_eq!(FAST_ATTENTION[0].shared_bytes(), 48128);
        assert_eq!(FAST_ATTENTION[1].shared_bytes(), 41600);
    }
}
