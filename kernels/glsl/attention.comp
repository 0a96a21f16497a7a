#version 450
// Fused attention out = softmax(scale q k^T + mask) v with grouped-query heads, f32 throughout,
// in the flash-attention style: one workgroup per (query block of BQ rows, query head, batch);
// keys and values go through shared memory BKV rows at a time in ascending order, and each
// query row keeps a running maximum m, a running sum l of exp(s - m) and its output
// accumulators, rescaled by exp(m_old - m_new) when m grows. Every sum has a fixed order (dot
// products over d ascending, row sums and P.V over the tile's keys ascending), no subgroup
// operations are used, so results do not depend on the subgroup size and are the same on
// every run. A query that sees no key outputs zeros.
//
// Layouts (elements): q [batch, q_len, q_stride] with head h at h * HEAD_DIM; k and v
// [batch, kv_len, kv_stride] with kv head h / group; out [batch, q_len, q_heads, HEAD_DIM];
// mask u32 [batch, kv_len] (nonzero keeps the key).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HEAD_DIM = 64;
// Query rows per workgroup (at most WORKGROUP_SIZE: invocation r < BQ keeps row r's sums).
layout(constant_id = 2) const uint BQ = 16;
// Keys per shared-memory tile.
layout(constant_id = 3) const uint BKV = 16;

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

// K rows are padded by one float so the invocations of one query, which read consecutive
// keys, hit different banks.
const uint KS = HEAD_DIM + 1u;
const uint ACC = (BQ * HEAD_DIM + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;

shared float qs[BQ * HEAD_DIM];
shared float ks[BKV * KS];
shared float vs[BKV * HEAD_DIM];
// Scores, then probabilities, of the current tile.
shared float ps[BQ * BKV];
// Per query row: the running maximum after this tile, and the factor that rescales what was
// accumulated before it (at the end: 1 / l).
shared float row_m[BQ];
shared float row_c[BQ];

// Marks a hidden score and a row that has seen no key yet: -FLT_MAX, not -inf, because
// Vulkan lets implementations assume operands are finite. A real score never equals it.
const float NONE = -3.40282347e38;

bool visible(uint b, uint i, uint j) {
    if (p.mask_kind == 1u) {
        return mask[p.m_off + b * p.kv_len + j] != 0u;
    }
    if (p.mask_kind == 2u) {
        return j + p.q_len <= i + p.kv_len;
    }
    return true;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint q0 = gl_WorkGroupID.x * BQ;
    uint h = gl_WorkGroupID.y;
    uint b = gl_WorkGroupID.z;
    uint kh = h / p.group;
    uint q_base = p.q_off + b * p.q_len * p.q_stride + h * HEAD_DIM;
    uint k_base = p.k_off + b * p.kv_len * p.kv_stride + kh * HEAD_DIM;
    uint v_base = p.v_off + b * p.kv_len * p.kv_stride + kh * HEAD_DIM;

    for (uint e = tid; e < BQ * HEAD_DIM; e += WORKGROUP_SIZE) {
        uint i = q0 + e / HEAD_DIM;
        qs[e] = i < p.q_len ? q[q_base + i * p.q_stride + e % HEAD_DIM] : 0.0;
    }

    float acc[ACC];
    [[unroll]] for (uint a = 0u; a < ACC; a++) {
        acc[a] = 0.0;
    }
    // Row statistics, kept by invocation r < BQ for row r.
    float m_run = NONE;
    float l_run = 0.0;

    // Keys past the last one any row of this block sees are skipped (causal mask).
    uint kv_end = p.kv_len;
    if (p.mask_kind == 2u) {
        uint last = min(q0 + BQ, p.q_len) - 1u;
        kv_end = last + p.kv_len < p.q_len ? 0u : min(p.kv_len, last + p.kv_len - p.q_len + 1u);
    }

    for (uint j0 = 0u; j0 < kv_end; j0 += BKV) {
        for (uint e = tid; e < BKV * HEAD_DIM; e += WORKGROUP_SIZE) {
            uint j = e / HEAD_DIM;
            uint d = e % HEAD_DIM;
            uint key = j0 + j;
            bool in_range = key < p.kv_len;
            ks[j * KS + d] = in_range ? k[k_base + key * p.kv_stride + d] : 0.0;
            vs[e] = in_range ? v[v_base + key * p.kv_stride + d] : 0.0;
        }
        barrier();

        // Scores of the tile.
        for (uint e = tid; e < BQ * BKV; e += WORKGROUP_SIZE) {
            uint r = e / BKV;
            uint j = e % BKV;
            uint i = q0 + r;
            uint key = j0 + j;
            float s = NONE;
            if (i < p.q_len && key < p.kv_len && visible(b, i, key)) {
                float dot = 0.0;
                [[dont_unroll]] for (uint d = 0u; d < HEAD_DIM; d++) {
                    dot = fma(qs[r * HEAD_DIM + d], ks[j * KS + d], dot);
                }
                s = dot * p.scale;
            }
            ps[e] = s;
        }
        barrier();

        // New row maxima and rescaling factors.
        if (tid < BQ) {
            float mt = m_run;
            for (uint j = 0u; j < BKV; j++) {
                mt = max(mt, ps[tid * BKV + j]);
            }
            // Nothing was accumulated while the row had no maximum, so its factor is moot.
            row_c[tid] = m_run == NONE ? 0.0 : exp_f32(m_run - mt);
            row_m[tid] = mt;
            m_run = mt;
        }
        barrier();

        for (uint e = tid; e < BQ * BKV; e += WORKGROUP_SIZE) {
            float s = ps[e];
            ps[e] = s == NONE ? 0.0 : exp_f32(s - row_m[e / BKV]);
        }
        barrier();

        if (tid < BQ) {
            float l = l_run * row_c[tid];
            for (uint j = 0u; j < BKV; j++) {
                l += ps[tid * BKV + j];
            }
            l_run = l;
        }
        [[unroll]] for (uint a = 0u; a < ACC; a++) {
            uint e = tid + a * WORKGROUP_SIZE;
            if (e < BQ * HEAD_DIM) {
                uint r = e / HEAD_DIM;
                uint d = e % HEAD_DIM;
                float s = acc[a] * row_c[r];
                [[dont_unroll]] for (uint j = 0u; j < BKV; j++) {
                    s = fma(ps[r * BKV + j], vs[j * HEAD_DIM + d], s);
                }
                acc[a] = s;
            }
        }
        // The next tile overwrites ks, vs, ps and row_c.
        barrier();
    }

    if (tid < BQ) {
        // l >= 1 once a key was seen (the maximum's own term is exp(0)).
        row_c[tid] = l_run > 0.0 ? div_rn(1.0, l_run) : 0.0;
    }
    barrier();
    uint o_base = p.o_off + (b * p.q_len * p.q_heads + h) * HEAD_DIM;
    [[unroll]] for (uint a = 0u; a < ACC; a++) {
        uint e = tid + a * WORKGROUP_SIZE;
        uint i = q0 + e / HEAD_DIM;
        if (e < BQ * HEAD_DIM && i < p.q_len) {
            o[o_base + i * p.q_heads * HEAD_DIM + e % HEAD_DIM] = acc[a] * row_c[e / HEAD_DIM];
        }
    }
}
