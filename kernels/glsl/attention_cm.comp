#version 450
// Fast-mode fused attention on cooperative matrices, flash-attention style, compiled only as
// the attention_cm_* variants of tools/shaderc's variant table, which define HD (the head
// dimension), BQ (query rows per workgroup, 16 per subgroup) and BKV (keys per tile). Same
// bindings, push constants, layouts and masks as attention.comp (see there and
// AttentionParams in src/ops.rs), for devices whose subgroups have 32 invocations and which
// offer the 16 x 16 x 16 f16 x f16 + f32 -> f32 shape (the host checks both).
//
// Rounding contract: q * scale (computed in f32), k and v are rounded to f16 when staged in
// shared memory, and so is each probability p before it multiplies v; everything else is f32:
// the scores q k^T (f16 products, exact, summed in f32 by the matrix unit), the running
// maxima, exp, the row sums l (of the rounded p, so the weights p / l sum to one) and the
// output accumulators. Operands must stay within f16 range (|q * scale|, |k|, |v| < 65504).
// tests/vulkan.rs (fast_attention_within_f16_rounding) derives the error bound from this.
//
// Work split: each subgroup owns 16 query rows of the block. Its q rows are cooperative
// matrices in registers for the whole run; for each tile of BKV keys it computes its scores
// S = q k^T (f32 accumulators stored to shared memory as [key][row]), runs the online softmax
// with two invocations per row (invocation r + 16 h takes keys 2c + h of row r), writes p as
// f16 to shared memory and accumulates O += p v in f32 accumulators that stay in registers.
// Apart from the k and v tiles, which the workgroup loads together (double-buffered: tile
// t + 1 is read into registers while tile t is used, and stored to the other buffer), each
// subgroup works alone, so only subgroup barriers separate its steps: one workgroup barrier
// per tile.
//
// Rescaling is lazy: each row exponentiates against a reference maximum m and keeps it while
// the tile maxima stay below m + TAU, so p <= exp(TAU) (far inside f16) and O needs no
// rescaling; when a row's tile maximum passes m + TAU, m becomes that maximum and, since the
// accumulators can only be scaled per row through memory, the subgroup's O goes through
// shared memory once, each row multiplied by exp(m_old - m_new). The first tile a row sees
// sets m without rescaling (nothing was accumulated). The result is the same function of the
// rounded operands whatever m is; only the rounding of p moves with it.
//
// -FLT_MAX (NONE) marks a hidden score and a row that has seen no key, as in attention.comp.
// A row that sees no key outputs zeros (its l stays 0).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

#define CM 16u
#define SG 32u
#define WARPS (BQ / 16u)
#define NT (WARPS * SG)
// vec4s per row of the head dimension, and shared rows in f16vec4 units: HD + 8 halves, so
// the 16-byte pieces of the matrix loads of 8 consecutive rows fall on distinct banks.
#define D4 (HD / 4u)
#define ST4 (D4 + 2u)
// 16-wide blocks along the head dimension, and 16-key blocks per tile.
#define DB (HD / CM)
#define NB (BKV / CM)
// Keys of a tile per invocation in the softmax.
#define KPL (BKV / 2u)
// Global vec4 loads per invocation: the q block, and one k or v tile.
#define Q_LOADS (BQ * D4 / NT)
#define KV_LOADS (BKV * D4 / NT)
// One k or v tile in shared memory, in f16vec4.
#define TILE (BKV * ST4)
// Floats of one subgroup's score block (BKV keys x 16 rows); it also stages NB output blocks.
#define SS (BKV * CM)
// How far a tile maximum may pass the reference maximum before rows are rescaled:
// p <= e^8 < 2981, and l <= kv_len * 2981.
#define TAU 8.0

#if HD % 16 != 0 || BQ % 16 != 0 || BKV % 16 != 0
#error "HD, BQ and BKV must be multiples of 16"
#endif
#if (BKV * HD / 4) % (BQ * 2) != 0
#error "each invocation must load whole groups of the k and v tiles"
#endif
#if BQ > 2 * BKV
#error "the q block is staged in the second k and v buffers"
#endif
#if (HD / 16) % (BKV / 16) != 0
#error "the output blocks are staged NB at a time"
#endif
#if BKV > BQ * 2
#error "one invocation per key stages the key visibility"
#endif

// The workgroup size is specialization constant 0 as in every shader; the host passes NT.
layout(local_size_x_id = 0) in;
// 1 when bindings start on 16-byte boundaries (minStorageBufferOffsetAlignment a multiple of
// 16), so the vector views below are aligned with the scalar ones.
layout(constant_id = 1) const uint VEC_OK = 1;

layout(set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1) readonly buffer K { float k[]; };
layout(set = 0, binding = 2) readonly buffer V { float v[]; };
layout(set = 0, binding = 3) readonly buffer Mask { uint mask[]; };
layout(set = 0, binding = 4) writeonly buffer Out { float o[]; };
// The same bindings viewed as vectors, for the aligned loads.
layout(set = 0, binding = 0) readonly buffer Q4 { vec4 q4[]; };
layout(set = 0, binding = 1) readonly buffer K4 { vec4 k4[]; };
layout(set = 0, binding = 2) readonly buffer V4 { vec4 v4[]; };

layout(push_constant) uniform Push {
    uint q_off;
    uint k_off;
    uint v_off;
    uint m_off;
    uint o_off;
    uint q_len;
    uint kv_len;
    uint q_heads;
    // q_heads / kv_heads
    uint group;
    uint q_stride;
    uint kv_stride;
    float scale;
    // 0 none, 1 key padding, 2 causal (bottom-right aligned)
    uint mask_kind;
} p;

// k and v tiles: k buffer 0, v buffer 0, k buffer 1, v buffer 1 (TILE each, rows of ST4).
// Before the first tile the q block is staged in the second pair.
shared f16vec4 kv_[4u * TILE];
// Per subgroup: the scores of the tile as [key][row] (SS floats), or NB output blocks as a
// row-major 16 x (16 NB) block while they are rescaled or written out.
shared float s_[WARPS * SS];
// Per subgroup: the probabilities of the tile as [key][row].
shared float16_t p_[WARPS * BKV * CM];
// Per key of the current and the next tile: 1 when it exists, lies before the causal end of
// the block and is not padding.
shared uint kvis_[2u * BKV];
// Per invocation: its part of a row maximum, then of a row sum.
shared float red_[WARPS * SG];
// Per row: the factor that rescales O and l for the current tile, then 1 / l.
shared float corr_[WARPS * CM];

const float NONE = -3.40282347e38;

bool q_vec() {
    return VEC_OK != 0u && p.q_off % 4u == 0u && p.q_stride % 4u == 0u;
}

// Whether k (value false) or v (true) rows can be read as vectors.
bool kv_vec(bool value) {
    return VEC_OK != 0u && (value ? p.v_off : p.k_off) % 4u == 0u && p.kv_stride % 4u == 0u;
}

// Elements d .. d + 3 of query row i (zeros past q_len); base is the head's first element.
vec4 load_q4(uint base, uint i, uint d) {
    if (i >= p.q_len) {
        return vec4(0.0);
    }
    uint e = base + i * p.q_stride + d;
    if (q_vec()) {
        return q4[e >> 2u];
    }
    return vec4(q[e], q[e + 1u], q[e + 2u], q[e + 3u]);
}

// Elements d .. d + 3 of row j of k (value false) or v (true), zeros from `end` on. The
// zeros matter for v: p = 0 there, and 0 * v must stay 0.
vec4 load_kv4(bool value, uint base, uint j, uint end, uint d) {
    if (j >= end) {
        return vec4(0.0);
    }
    uint e = base + j * p.kv_stride + d;
    if (kv_vec(value)) {
        return value ? v4[e >> 2u] : k4[e >> 2u];
    }
    if (value) {
        return vec4(v[e], v[e + 1u], v[e + 2u], v[e + 3u]);
    }
    return vec4(k[e], k[e + 1u], k[e + 2u], k[e + 3u]);
}

// 1 when key j of batch b lies before `end` and is not padding.
uint key_visible(uint b, uint j, uint end) {
    return j < end && (p.mask_kind != 1u || mask[p.m_off + b * p.kv_len + j] != 0u) ? 1u : 0u;
}

// Whether query i exists and, under the causal mask, may see key j.
bool row_sees(uint i, uint j) {
    return i < p.q_len && (p.mask_kind != 2u || j + p.q_len <= i + p.kv_len);
}

#define SUBGROUP_SYNC() \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier()

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
    uint q0 = gl_WorkGroupID.x * BQ;
    uint h = gl_WorkGroupID.y;
    uint b = gl_WorkGroupID.z;
    uint kh = h / p.group;
    uint q_base = p.q_off + b * p.q_len * p.q_stride + h * HD;
    uint k_base = p.k_off + b * p.kv_len * p.kv_stride + kh * HD;
    uint v_base = p.v_off + b * p.kv_len * p.kv_stride + kh * HD;

    // Keys past the last one any row of this block sees are skipped (causal mask).
    uint kv_end = p.kv_len;
    if (p.mask_kind == 2u) {
        uint last = min(q0 + BQ, p.q_len) - 1u;
        kv_end = last + p.kv_len < p.q_len ? 0u : min(p.kv_len, last + p.kv_len - p.q_len + 1u);
    }
    uint tiles = (kv_end + BKV - 1u) / BKV;

    // The q block (scaled, then rounded) into the second buffer pair; k and v tile 0 into
    // the first.
    [[unroll]] for (uint l = 0u; l < Q_LOADS; l++) {
        uint e = tid + l * NT;
        kv_[2u * TILE + (e / D4) * ST4 + e % D4] =
            f16vec4(load_q4(q_base, q0 + e / D4, 4u * (e % D4)) * p.scale);
    }
    vec4 kvr[KV_LOADS];
    [[unroll]] for (uint l = 0u; l < KV_LOADS; l++) {
        uint e = tid + l * NT;
        kvr[l] = load_kv4(false, k_base, e / D4, kv_end, 4u * (e % D4));
    }
    [[unroll]] for (uint l = 0u; l < KV_LOADS; l++) {
        uint e = tid + l * NT;
        kv_[(e / D4) * ST4 + e % D4] = f16vec4(kvr[l]);
    }
    [[unroll]] for (uint l = 0u; l < KV_LOADS; l++) {
        uint e = tid + l * NT;
        kvr[l] = load_kv4(true, v_base, e / D4, kv_end, 4u * (e % D4));
    }
    [[unroll]] for (uint l = 0u; l < KV_LOADS; l++) {
        uint e = tid + l * NT;
        kv_[TILE + (e / D4) * ST4 + e % D4] = f16vec4(kvr[l]);
    }
    if (tid < BKV) {
        kvis_[tid] = key_visible(b, tid, kv_end);
    }
    barrier();
    coopmat<float16_t, gl_ScopeSubgroup, CM, CM, gl_MatrixUseA> qa[DB];
    [[unroll]] for (uint d = 0u; d < DB; d++) {
        coopMatLoad(qa[d], kv_, 2u * TILE + sg * CM * ST4 + d * 4u, ST4,
                    gl_CooperativeMatrixLayoutRowMajor);
    }
    // The second buffer pair is overwritten during tile 0.
    barrier();

    coopmat<float, gl_ScopeSubgroup, CM, CM, gl_MatrixUseAccumulator> acc[DB];
    [[unroll]] for (uint d = 0u; d < DB; d++) {
        acc[d] = coopmat<float, gl_ScopeSubgroup, CM, CM, gl_MatrixUseAccumulator>(0.0);
    }
    // The softmax rows and keys of this invocation, and its row's state: the reference
    // maximum (the same in both invocations of a row) and its part of the row sum.
    uint r = lane % CM;
    uint half_ = lane / CM;
    uint i = q0 + sg * CM + r;
    float m_ref = NONE;
    float l_part = 0.0;
    uint sb = sg * SS;
    uint pb = sg * BKV * CM;

    for (uint t = 0u; t < tiles; t++) {
        uint j0 = t * BKV;
        bool more = t + 1u < tiles;
        uint kb = (t & 1u) * 2u * TILE;
        uint vb = kb + TILE;
        uint kn = (~t & 1u) * 2u * TILE;
        uint vn = kn + TILE;
        uint kvis = 0u;
        if (more) {
            [[unroll]] for (uint l = 0u; l < KV_LOADS; l++) {
                uint e = tid + l * NT;
                kvr[l] = load_kv4(false, k_base, j0 + BKV + e / D4, kv_end, 4u * (e % D4));
            }
            if (tid < BKV) {
                kvis = key_visible(b, j0 + BKV + tid, kv_end);
            }
        }

        // S = q k^T; column j of k^T is row j of the k tile.
        coopmat<float, gl_ScopeSubgroup, CM, CM, gl_MatrixUseAccumulator> s[NB];
        [[unroll]] for (uint n = 0u; n < NB; n++) {
            s[n] = coopmat<float, gl_ScopeSubgroup, CM, CM, gl_MatrixUseAccumulator>(0.0);
        }
        [[unroll]] for (uint d = 0u; d < DB; d++) {
            [[unroll]] for (uint n = 0u; n < NB; n++) {
                coopmat<float16_t, gl_ScopeSubgroup, CM, CM, gl_MatrixUseB> kt;
                coopMatLoad(kt, kv_, kb + n * CM * ST4 + d * 4u, ST4,
                            gl_CooperativeMatrixLayoutColumnMajor);
                s[n] = coopMatMulAdd(qa[d], kt, s[n]);
            }
        }
        // Column-major with stride 16: score (row, key) at key * 16 + row.
        [[unroll]] for (uint n = 0u; n < NB; n++) {
            coopMatStore(s[n], s_, sb + n * CM * CM, CM, gl_CooperativeMatrixLayoutColumnMajor);
        }
        // The other k buffer and key flags were last read before the previous workgroup
        // barrier.
        if (more) {
            [[unroll]] for (uint l = 0u; l < KV_LOADS; l++) {
                uint e = tid + l * NT;
                kv_[kn + (e / D4) * ST4 + e % D4] = f16vec4(kvr[l]);
            }
            if (tid < BKV) {
                kvis_[(~t & 1u) * BKV + tid] = kvis;
            }
            [[unroll]] for (uint l = 0u; l < KV_LOADS; l++) {
                uint e = tid + l * NT;
                kvr[l] = load_kv4(true, v_base, j0 + BKV + e / D4, kv_end, 4u * (e % D4));
            }
        }
        SUBGROUP_SYNC();

        // Online softmax: this invocation's scores (lanes r and r + 16 read distinct banks),
        // the row's tile maximum from both halves, the reference maximum, p and l.
        float sv[KPL];
        float mx = NONE;
        [[unroll]] for (uint c = 0u; c < KPL; c++) {
            uint key = 2u * c + half_;
            float x = s_[sb + key * CM + r];
            sv[c] = kvis_[(t & 1u) * BKV + key] != 0u && row_sees(i, j0 + key) ? x : NONE;
            mx = max(mx, sv[c]);
        }
        red_[sg * SG + lane] = mx;
        SUBGROUP_SYNC();
        mx = max(mx, red_[sg * SG + (lane ^ CM)]);
        float corr = 1.0;
        if (mx != NONE) {
            if (m_ref == NONE) {
                m_ref = mx;
            } else if (mx > m_ref + TAU) {
                corr = exp_f32(m_ref - mx);
                m_ref = mx;
            }
        }
        float lsum = 0.0;
        [[unroll]] for (uint c = 0u; c < KPL; c++) {
            // A visible score is at most m_ref + TAU, and m_ref is a real score then.
            float16_t pk = float16_t(sv[c] == NONE ? 0.0 : exp(sv[c] - m_ref));
            lsum += float(pk);
            p_[pb + (2u * c + half_) * CM + r] = pk;
        }
        l_part = l_part * corr + lsum;
        if (half_ == 0u) {
            corr_[sg * CM + r] = corr;
        }
        SUBGROUP_SYNC();

        // Every invocation reads the same factors, so the branch is uniform in the subgroup.
        bool rescale = false;
        [[unroll]] for (uint x = 0u; x < CM; x++) {
            rescale = rescale || corr_[sg * CM + x] != 1.0;
        }
        if (rescale) {
            [[unroll]] for (uint g = 0u; g < DB / NB; g++) {
                [[unroll]] for (uint n = 0u; n < NB; n++) {
                    coopMatStore(acc[g * NB + n], s_, sb + n * CM, CM * NB,
                                 gl_CooperativeMatrixLayoutRowMajor);
                }
                SUBGROUP_SYNC();
                [[unroll]] for (uint x = 0u; x < SS / SG; x++) {
                    uint e = lane + x * SG;
                    s_[sb + e] *= corr_[sg * CM + e / (CM * NB)];
                }
                SUBGROUP_SYNC();
                [[unroll]] for (uint n = 0u; n < NB; n++) {
                    coopMatLoad(acc[g * NB + n], s_, sb + n * CM, CM * NB,
                                gl_CooperativeMatrixLayoutRowMajor);
                }
                SUBGROUP_SYNC();
            }
        }

        // O += p v.
        [[unroll]] for (uint n = 0u; n < NB; n++) {
            coopmat<float16_t, gl_ScopeSubgroup, CM, CM, gl_MatrixUseA> pa;
            coopMatLoad(pa, p_, pb + n * CM * CM, CM, gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint d = 0u; d < DB; d++) {
                coopmat<float16_t, gl_ScopeSubgroup, CM, CM, gl_MatrixUseB> vt;
                coopMatLoad(vt, kv_, vb + n * CM * ST4 + d * 4u, ST4,
                            gl_CooperativeMatrixLayoutRowMajor);
                acc[d] = coopMatMulAdd(pa, vt, acc[d]);
            }
        }
        // The other v buffer was last read before the previous workgroup barrier.
        if (more) {
            [[unroll]] for (uint l = 0u; l < KV_LOADS; l++) {
                uint e = tid + l * NT;
                kv_[vn + (e / D4) * ST4 + e % D4] = f16vec4(kvr[l]);
            }
        }
        // The next tile overwrites this tile's buffers, kvis_, s_, p_, red_ and corr_.
        barrier();
    }

    // 1 / l per row (0 for a row that saw no key), then O / l through the staging area, NB
    // blocks at a time: row x of the staged block is 16 NB consecutive floats of output row
    // q0 + 16 sg + x.
    red_[sg * SG + lane] = l_part;
    SUBGROUP_SYNC();
    if (lane < CM) {
        float l = red_[sg * SG + lane] + red_[sg * SG + lane + CM];
        corr_[sg * CM + lane] = l > 0.0 ? 1.0 / l : 0.0;
    }
    SUBGROUP_SYNC();
    uint o_base = p.o_off + (b * p.q_len * p.q_heads + h) * HD;
    [[unroll]] for (uint g = 0u; g < DB / NB; g++) {
        [[unroll]] for (uint n = 0u; n < NB; n++) {
            coopMatStore(acc[g * NB + n], s_, sb + n * CM, CM * NB,
                         gl_CooperativeMatrixLayoutRowMajor);
        }
        SUBGROUP_SYNC();
        [[unroll]] for (uint x = 0u; x < SS / SG; x++) {
            uint e = lane + x * SG;
            uint row = e / (CM * NB);
            uint qi = q0 + sg * CM + row;
            if (qi < p.q_len) {
                o[o_base + qi * p.q_heads * HD + g * CM * NB + e % (CM * NB)] =
                    s_[sb + e] * corr_[sg * CM + row];
            }
        }
        SUBGROUP_SYNC();
    }
}
