#version 450
// Fast-mode fused attention on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2),
// flash-attention style: the whole BQ x HD output block of a workgroup is one accumulator, the
// scores of a tile of BKV keys another, and the online softmax runs on them with the
// extension's row reductions, so no score or probability goes through memory written by us
// (the driver lays out, stages and schedules). Same bindings, push constants, layouts and masks
// as attention.comp and attention_cm.comp (see there and AttentionParams in src/ops.rs); the
// tile (BQ, BKV) and the head dimension HD are specialization constants.
//
// Rounding contract (the one attention_cm.comp states, which tests/vulkan.rs
// fast_attention_within_f16_rounding bounds): q * scale (an f32 product), k and v are rounded
// to f16; the scores are f16 products summed in f32 by the matrix unit; the running maxima,
// exp and the output accumulators are f32; each probability p is rounded to f16 before it
// multiplies v, and the row sums l add those rounded p (by a product with a matrix of ones,
// summed in f32), so the weights p / l sum to one. Operands must stay within f16 range.
//
// Rescaling is eager, as in the flash-attention papers: per tile, m_new = max(m, tile max),
// p = exp(s - m_new) <= 1, and O and l are multiplied by exp(m - m_new) (the same rounded
// factor for both, so their ratio does not move with it).
//
// A hidden score is -FLT_MAX (NONE); m starts at -FLT_MAX / 2, so exp(NONE - m) is 0 without
// an infinity in sight, and a row that sees no key keeps l = 0 and outputs zeros.
//
// Edges: the loads clamp to q_len and to the keys the block may see (kv_end) with the constant
// 0, and the store to q_len; k rows past kv_end give score 0, which the mask hides.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BQ = 64;
layout(constant_id = 2) const uint BKV = 32;
layout(constant_id = 3) const uint HD = 128;
// 1: split precision. q scale, k, p and v are each carried as an f16 high part (the f32 value
// with its mantissa cut to 10 bits) plus an f16 low part (the rest times 2^11), and each
// product sums hi hi + (hi lo + lo hi) 2^-11 in f32 accumulators (see linear_cm2.comp); the
// softmax is strict's (exp_f32), and l sums the f32 p with a row reduction.
layout(constant_id = 4) const uint SPLIT = 0;

layout(set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1) readonly buffer K { float k[]; };
layout(set = 0, binding = 2) readonly buffer V { float v[]; };
layout(set = 0, binding = 3) readonly buffer Mask { uint mask[]; };
layout(set = 0, binding = 4) writeonly buffer Out { float o[]; };

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

const float NONE = -3.40282347e38;
const float M_START = -1.70141173e38;

float max_op(const in float a, const in float b) {
    return max(a, b);
}

// Row reductions whose rows are already uniform: any element stands for the row.
float smear_op(const in float a, const in float b) {
    return a;
}

// Score (r, c) of the tile whose first key is j0, or NONE when key j0 + c is past kv_end, is
// padding of batch b, or lies after the causal end of query q0 + r.
float hide(const in uint r, const in uint c, const in float s, const in uint j0,
           const in uint kv_end, const in uint q0, const in uint b) {
    uint j = j0 + c;
    if (j >= kv_end) {
        return NONE;
    }
    if (p.mask_kind == 1u && mask[p.m_off + b * p.kv_len + j] == 0u) {
        return NONE;
    }
    if (p.mask_kind == 2u && j + p.q_len > q0 + r + p.kv_len) {
        return NONE;
    }
    return s;
}

float add_op(const in float a, const in float b) {
    return a + b;
}

// coopMatPerElementNV callbacks: split precision's high and low parts (common.glsl).
float cm_hi(const in uint r, const in uint c, const in float v) {
    return f16_hi_part(v);
}

float cm_lo(const in uint r, const in uint c, const in float v) {
    return f16_lo_part(v);
}

#define ACC(R, C) coopmat<float, gl_ScopeWorkgroup, R, C, gl_MatrixUseAccumulator>
#define F16(R, C, USE) coopmat<float16_t, gl_ScopeWorkgroup, R, C, USE>

void main() {
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

    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lq =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lq = setTensorLayoutDimensionNV(lq, p.q_len, HD);
    lq = setTensorLayoutStrideNV(lq, p.q_stride, 1);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lkv =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lkv = setTensorLayoutDimensionNV(lkv, kv_end, HD);
    lkv = setTensorLayoutStrideNV(lkv, p.kv_stride, 1);

    // q * scale in f32, then rounded (f32 elements load as an f32 matrix and convert, as in
    // linear_cm2.comp).
    ACC(BQ, HD) qf;
    coopMatLoadTensorNV(qf, q, q_base, sliceTensorLayoutNV(lq, q0, BQ, 0, HD));
    qf = qf * p.scale;

    ACC(BQ, HD) acc = ACC(BQ, HD)(0.0);
    // Row maxima and sums, each row's value in every column.
    ACC(BQ, BKV) m = ACC(BQ, BKV)(M_START);
    ACC(BQ, BKV) l = ACC(BQ, BKV)(0.0);

    if (SPLIT == 1u) {
        ACC(BQ, HD) part;
        coopMatPerElementNV(part, qf, cm_hi);
        F16(BQ, HD, gl_MatrixUseA) qh = F16(BQ, HD, gl_MatrixUseA)(part);
        coopMatPerElementNV(part, qf, cm_lo);
        F16(BQ, HD, gl_MatrixUseA) ql = F16(BQ, HD, gl_MatrixUseA)(part);
        ACC(BQ, HD) acc_lo = ACC(BQ, HD)(0.0);
        [[dont_unroll]] for (uint j0 = 0u; j0 < kv_end; j0 += BKV) {
            ACC(HD, BKV) kf, kp;
            coopMatLoadTensorNV(kf, k, k_base, sliceTensorLayoutNV(lkv, j0, BKV, 0, HD),
                                transpose);
            coopMatPerElementNV(kp, kf, cm_hi);
            F16(HD, BKV, gl_MatrixUseB) kh = F16(HD, BKV, gl_MatrixUseB)(kp);
            coopMatPerElementNV(kp, kf, cm_lo);
            F16(HD, BKV, gl_MatrixUseB) kl = F16(HD, BKV, gl_MatrixUseB)(kp);
            ACC(BQ, BKV) s = coopMatMulAdd(qh, kh, ACC(BQ, BKV)(0.0));
            ACC(BQ, BKV) s_lo = coopMatMulAdd(qh, kl, ACC(BQ, BKV)(0.0));
            s_lo = coopMatMulAdd(ql, kh, s_lo);
            s = s + s_lo * float(1.0 / 2048.0);
            if (p.mask_kind != 0u || j0 + BKV > kv_end) {
                coopMatPerElementNV(s, s, hide, j0, kv_end, q0, b);
            }

            ACC(BQ, BKV) tmax;
            coopMatReduceNV(tmax, s, gl_CooperativeMatrixReduceRowNV, max_op);
            ACC(BQ, BKV) m_old = m;
            ACC(BQ, BKV) pf;
            ACC(BQ, BKV) corr;
            [[unroll]] for (uint e = 0u; e < m.length(); e++) {
                m[e] = max(m_old[e], tmax[e]);
                pf[e] = s[e] == NONE ? 0.0 : exp_f32(s[e] - m[e]);
                corr[e] = exp_f32(m_old[e] - m[e]);
            }
            ACC(BQ, BKV) rowsum;
            coopMatReduceNV(rowsum, pf, gl_CooperativeMatrixReduceRowNV, add_op);
            l = l * corr + rowsum;
            ACC(BQ, BKV) pp;
            coopMatPerElementNV(pp, pf, cm_hi);
            F16(BQ, BKV, gl_MatrixUseA) ph = F16(BQ, BKV, gl_MatrixUseA)(pp);
            coopMatPerElementNV(pp, pf, cm_lo);
            F16(BQ, BKV, gl_MatrixUseA) pl = F16(BQ, BKV, gl_MatrixUseA)(pp);

            ACC(BKV, HD) vf, vp;
            coopMatLoadTensorNV(vf, v, v_base, sliceTensorLayoutNV(lkv, j0, BKV, 0, HD));
            coopMatPerElementNV(vp, vf, cm_hi);
            F16(BKV, HD, gl_MatrixUseB) vh = F16(BKV, HD, gl_MatrixUseB)(vp);
            coopMatPerElementNV(vp, vf, cm_lo);
            F16(BKV, HD, gl_MatrixUseB) vl = F16(BKV, HD, gl_MatrixUseB)(vp);
            ACC(BQ, HD) corr_wide;
            coopMatReduceNV(corr_wide, corr, gl_CooperativeMatrixReduceRowNV, smear_op);
            acc = acc * corr_wide;
            acc_lo = acc_lo * corr_wide;
            acc = coopMatMulAdd(ph, vh, acc);
            acc_lo = coopMatMulAdd(ph, vl, acc_lo);
            acc_lo = coopMatMulAdd(pl, vh, acc_lo);
        }
        acc = acc + acc_lo * float(1.0 / 2048.0);
    } else {
        coopmat<float16_t, gl_ScopeWorkgroup, BQ, HD, gl_MatrixUseA> qa =
            coopmat<float16_t, gl_ScopeWorkgroup, BQ, HD, gl_MatrixUseA>(qf);
        coopmat<float16_t, gl_ScopeWorkgroup, BKV, BKV, gl_MatrixUseB> ones =
            coopmat<float16_t, gl_ScopeWorkgroup, BKV, BKV, gl_MatrixUseB>(1.0);

        [[dont_unroll]] for (uint j0 = 0u; j0 < kv_end; j0 += BKV) {
            // S = (q scale) k^T: k^T is the tile of k rows read through a transposing view.
            ACC(HD, BKV) kf;
            coopMatLoadTensorNV(kf, k, k_base, sliceTensorLayoutNV(lkv, j0, BKV, 0, HD), transpose);
            coopmat<float16_t, gl_ScopeWorkgroup, HD, BKV, gl_MatrixUseB> kt =
                coopmat<float16_t, gl_ScopeWorkgroup, HD, BKV, gl_MatrixUseB>(kf);
            ACC(BQ, BKV) s = ACC(BQ, BKV)(0.0);
            s = coopMatMulAdd(qa, kt, s);
            if (p.mask_kind != 0u || j0 + BKV > kv_end) {
                coopMatPerElementNV(s, s, hide, j0, kv_end, q0, b);
            }

            ACC(BQ, BKV) tmax;
            coopMatReduceNV(tmax, s, gl_CooperativeMatrixReduceRowNV, max_op);
            ACC(BQ, BKV) m_old = m;
            ACC(BQ, BKV) pf;
            ACC(BQ, BKV) corr;
            [[unroll]] for (uint e = 0u; e < m.length(); e++) {
                m[e] = max(m_old[e], tmax[e]);
                pf[e] = exp(s[e] - m[e]);
                corr[e] = exp(m_old[e] - m[e]);
            }
            coopmat<float16_t, gl_ScopeWorkgroup, BQ, BKV, gl_MatrixUseA> pa =
                coopmat<float16_t, gl_ScopeWorkgroup, BQ, BKV, gl_MatrixUseA>(pf);
            // l = l corr + the sum of the rounded p of each row (in every column).
            ACC(BQ, BKV) rowsum = coopMatMulAdd(pa, ones, ACC(BQ, BKV)(0.0));
            l = l * corr + rowsum;

            ACC(BKV, HD) vf;
            coopMatLoadTensorNV(vf, v, v_base, sliceTensorLayoutNV(lkv, j0, BKV, 0, HD));
            coopmat<float16_t, gl_ScopeWorkgroup, BKV, HD, gl_MatrixUseB> vb =
                coopmat<float16_t, gl_ScopeWorkgroup, BKV, HD, gl_MatrixUseB>(vf);
            ACC(BQ, HD) corr_wide;
            coopMatReduceNV(corr_wide, corr, gl_CooperativeMatrixReduceRowNV, smear_op);
            acc = acc * corr_wide;
            acc = coopMatMulAdd(pa, vb, acc);
        }
    }

    // O / l, with 1 / l = 0 for a row that saw no key.
    ACC(BQ, HD) inv;
    coopMatReduceNV(inv, l, gl_CooperativeMatrixReduceRowNV, smear_op);
    [[unroll]] for (uint e = 0u; e < inv.length(); e++) {
        inv[e] = inv[e] > 0.0 ? 1.0 / inv[e] : 0.0;
    }
    acc = acc * inv;
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lo =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lo = setTensorLayoutDimensionNV(lo, p.q_len, HD);
    lo = setTensorLayoutStrideNV(lo, p.q_heads * HD, 1);
    uint o_base = p.o_off + (b * p.q_len * p.q_heads + h) * HD;
    coopMatStoreTensorNV(acc, o, o_base, sliceTensorLayoutNV(lo, q0, BQ, 0, HD));
}
