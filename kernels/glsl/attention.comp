#version 450
// Fused attention out = softmax(scale q k^T + mask) v with grouped-query heads, f32 throughout,
// in the flash-attention style: one workgroup per (query block of BQ rows, query head, batch).
// The query block stays in shared memory; keys and values pass through it BKV rows at a time
// in ascending order (the next tile is read into registers while the current one is used), and
// each query row keeps a running maximum m, a running sum l of exp(s - m) and its output
// accumulators, rescaled by exp(m_old - m_new) when m grows.
//
// Both products are register-tiled like a GEMM: an invocation computes 2 x 2 scores (rows r,
// r + BQ/2; keys j, j + BKV/2) with vec4 reads along the head dimension, and owns 4 query rows
// x 8 output columns (4 at 4c, 4 at DP/2 + 4c) of P V. Every sum has a fixed order: a score is
// four fma chains over d = 4t + lane, t ascending, added as (x + y) + (z + w); l and P V run
// over the keys ascending. No subgroup operations are used, so results do not depend on the
// subgroup size and are the same on every run. A query that sees no key outputs zeros.
//
// Layouts (elements): q [batch, q_len, q_stride] with head h at h * HEAD_DIM; k and v
// [batch, kv_len, kv_stride] with kv head h / group; out [batch, q_len, q_heads, HEAD_DIM];
// mask u32 [batch, kv_len] (nonzero keeps the key).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HEAD_DIM = 64;
// Query rows per workgroup (a multiple of 4).
layout(constant_id = 2) const uint BQ = 16;
// Keys per shared-memory tile (a multiple of 2).
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

// The head dimension padded with zeros to a multiple of 8 (two vec4 column groups per
// invocation), in vec4s.
const uint DP = (HEAD_DIM + 7u) / 8u * 8u;
const uint D4 = DP / 4u;
const uint HALF4 = D4 / 2u;
// q and k rows are padded by one vec4 so the 8 rows a quarter-warp reads at one d start in
// different banks.
const uint RS4 = D4 + 1u;
// Score tiles: BQ/2 row pairs x BKV/2 key pairs; P V tiles: BQ/4 row quads x D4/2 column pairs.
const uint NRG = BQ / 2u;
const uint NKG = BKV / 2u;
const uint S_TILES = NRG * NKG;
const uint S_PER = (S_TILES + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;
const uint R4 = BQ / 4u;
const uint PV_TILES = R4 * HALF4;
const uint PV_PER = (PV_TILES + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;
// Elements of one k (or v) tile each invocation stages.
const uint KV_PER = (BKV * DP + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;

shared vec4 qs[BQ * RS4];
shared vec4 ks[BKV * RS4];
shared vec4 vs[BKV * D4];
// Probabilities of the current tile, [key][row] so one vec4 holds four rows of one key.
shared vec4 ps[BKV * R4];
// Per key pair and row: the maximum of the pair's scores in the current tile.
shared float pmax[NKG * BQ];
// Per row: the factor that rescales what was accumulated before the current tile.
shared vec4 corr[R4];

// Marks a hidden score and a row that has seen no key yet: -FLT_MAX, not -inf, because
// Vulkan lets implementations assume operands are finite. A real score never equals it.
const float NONE = -3.40282347e38;

// Whether key j of batch b exists and is not padding.
bool key_visible(uint b, uint j) {
    return j < p.kv_len && (p.mask_kind != 1u || mask[p.m_off + b * p.kv_len + j] != 0u);
}

// Whether query i exists and, under the causal mask, may see key j.
bool row_sees(uint i, uint j) {
    return i < p.q_len && (p.mask_kind != 2u || j + p.q_len <= i + p.kv_len);
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

    for (uint e = tid; e < BQ * DP; e += WORKGROUP_SIZE) {
        uint r = e / DP;
        uint d = e % DP;
        uint i = q0 + r;
        qs[r * RS4 + d / 4u][d % 4u] =
            i < p.q_len && d < HEAD_DIM ? q[q_base + i * p.q_stride + d] : 0.0;
    }

    // Keys past the last one any row of this block sees are skipped (causal mask).
    uint kv_end = p.kv_len;
    if (p.mask_kind == 2u) {
        uint last = min(q0 + BQ, p.q_len) - 1u;
        kv_end = last + p.kv_len < p.q_len ? 0u : min(p.kv_len, last + p.kv_len - p.q_len + 1u);
    }

    // The staged k and v elements of the next tile.
    float kr[KV_PER];
    float vr[KV_PER];
    [[unroll]] for (uint a = 0u; a < KV_PER; a++) {
        uint e = tid + a * WORKGROUP_SIZE;
        uint j = e / DP;
        uint d = e % DP;
        bool in_range = e < BKV * DP && j < kv_end && d < HEAD_DIM;
        kr[a] = in_range ? k[k_base + j * p.kv_stride + d] : 0.0;
        vr[a] = in_range ? v[v_base + j * p.kv_stride + d] : 0.0;
    }

    // Score tiles: running maxima of their two rows (the same in every invocation that
    // shares a row: maxima are exact).
    float m_run[S_PER * 2u];
    [[unroll]] for (uint a = 0u; a < S_PER * 2u; a++) {
        m_run[a] = NONE;
    }
    // P V tiles: row sums and accumulators (row x, columns 4c and DP/2 + 4c).
    vec4 l_run[PV_PER];
    vec4 acc[PV_PER * 8u];
    [[unroll]] for (uint a = 0u; a < PV_PER; a++) {
        l_run[a] = vec4(0.0);
        [[unroll]] for (uint x = 0u; x < 8u; x++) {
            acc[a * 8u + x] = vec4(0.0);
        }
    }

    for (uint j0 = 0u; j0 < kv_end; j0 += BKV) {
        [[unroll]] for (uint a = 0u; a < KV_PER; a++) {
            uint e = tid + a * WORKGROUP_SIZE;
            if (e < BKV * DP) {
                uint j = e / DP;
                uint d = e % DP;
                ks[j * RS4 + d / 4u][d % 4u] = kr[a];
                vs[j * D4 + d / 4u][d % 4u] = vr[a];
            }
        }
        barrier();
        // Read the next tile while this one is used.
        if (j0 + BKV < kv_end) {
            [[unroll]] for (uint a = 0u; a < KV_PER; a++) {
                uint e = tid + a * WORKGROUP_SIZE;
                uint j = j0 + BKV + e / DP;
                uint d = e % DP;
                bool in_range = e < BKV * DP && j < kv_end && d < HEAD_DIM;
                kr[a] = in_range ? k[k_base + j * p.kv_stride + d] : 0.0;
                vr[a] = in_range ? v[v_base + j * p.kv_stride + d] : 0.0;
            }
        }

        // Scores of the tile, and each key pair's maxima per row.
        vec4 s[S_PER];
        [[unroll]] for (uint a = 0u; a < S_PER; a++) {
            uint t = tid + a * WORKGROUP_SIZE;
            s[a] = vec4(NONE);
            if (t < S_TILES) {
                uint rg = t % NRG;
                uint kg = t / NRG;
                vec4 a00 = vec4(0.0);
                vec4 a01 = vec4(0.0);
                vec4 a10 = vec4(0.0);
                vec4 a11 = vec4(0.0);
                uint r0 = rg * RS4;
                uint r1 = (rg + NRG) * RS4;
                uint c0 = kg * RS4;
                uint c1 = (kg + NKG) * RS4;
                for (uint t4 = 0u; t4 < D4; t4++) {
                    vec4 x0 = qs[r0 + t4];
                    vec4 x1 = qs[r1 + t4];
                    vec4 y0 = ks[c0 + t4];
                    vec4 y1 = ks[c1 + t4];
                    a00 = fma(x0, y0, a00);
                    a01 = fma(x0, y1, a01);
                    a10 = fma(x1, y0, a10);
                    a11 = fma(x1, y1, a11);
                }
                uint i0 = q0 + rg;
                uint i1 = i0 + NRG;
                uint jj0 = j0 + kg;
                uint jj1 = jj0 + NKG;
                bool k0 = key_visible(b, jj0);
                bool k1 = key_visible(b, jj1);
                bool v00 = k0 && row_sees(i0, jj0);
                bool v01 = k1 && row_sees(i0, jj1);
                bool v10 = k0 && row_sees(i1, jj0);
                bool v11 = k1 && row_sees(i1, jj1);
                s[a] = vec4(
                    v00 ? ((a00.x + a00.y) + (a00.z + a00.w)) * p.scale : NONE,
                    v01 ? ((a01.x + a01.y) + (a01.z + a01.w)) * p.scale : NONE,
                    v10 ? ((a10.x + a10.y) + (a10.z + a10.w)) * p.scale : NONE,
                    v11 ? ((a11.x + a11.y) + (a11.z + a11.w)) * p.scale : NONE);
                pmax[kg * BQ + rg] = max(s[a].x, s[a].y);
                pmax[kg * BQ + rg + NRG] = max(s[a].z, s[a].w);
            }
        }
        barrier();

        // New row maxima, probabilities and rescaling factors.
        [[unroll]] for (uint a = 0u; a < S_PER; a++) {
            uint t = tid + a * WORKGROUP_SIZE;
            if (t < S_TILES) {
                uint rg = t % NRG;
                uint kg = t / NRG;
                float m0 = m_run[2u * a];
                float m1 = m_run[2u * a + 1u];
                for (uint g = 0u; g < NKG; g++) {
                    m0 = max(m0, pmax[g * BQ + rg]);
                    m1 = max(m1, pmax[g * BQ + rg + NRG]);
                }
                vec4 sa = s[a];
                vec4 pr = vec4(
                    sa.x == NONE ? 0.0 : exp_f32(sa.x - m0),
                    sa.y == NONE ? 0.0 : exp_f32(sa.y - m0),
                    sa.z == NONE ? 0.0 : exp_f32(sa.z - m1),
                    sa.w == NONE ? 0.0 : exp_f32(sa.w - m1));
                uint r1 = rg + NRG;
                ps[kg * R4 + rg / 4u][rg % 4u] = pr.x;
                ps[(kg + NKG) * R4 + rg / 4u][rg % 4u] = pr.y;
                ps[kg * R4 + r1 / 4u][r1 % 4u] = pr.z;
                ps[(kg + NKG) * R4 + r1 / 4u][r1 % 4u] = pr.w;
                if (kg == 0u) {
                    // Nothing was accumulated while the row had no maximum, so its factor is
                    // moot.
                    float o0 = m_run[2u * a];
                    float o1 = m_run[2u * a + 1u];
                    corr[rg / 4u][rg % 4u] = o0 == NONE ? 0.0 : exp_f32(o0 - m0);
                    corr[r1 / 4u][r1 % 4u] = o1 == NONE ? 0.0 : exp_f32(o1 - m1);
                }
                m_run[2u * a] = m0;
                m_run[2u * a + 1u] = m1;
            }
        }
        barrier();

        // l = l c + sum_j p_j and acc = acc c + sum_j p_j v_j, keys ascending.
        [[unroll]] for (uint a = 0u; a < PV_PER; a++) {
            uint t = tid + a * WORKGROUP_SIZE;
            if (t < PV_TILES) {
                uint cg = t % HALF4;
                uint rq = t / HALF4;
                vec4 c = corr[rq];
                vec4 l = l_run[a] * c;
                vec4 oc[8];
                [[unroll]] for (uint x = 0u; x < 4u; x++) {
                    oc[x] = acc[a * 8u + x] * c[x];
                    oc[4u + x] = acc[a * 8u + 4u + x] * c[x];
                }
                for (uint j = 0u; j < BKV; j++) {
                    vec4 pj = ps[j * R4 + rq];
                    vec4 w0 = vs[j * D4 + cg];
                    vec4 w1 = vs[j * D4 + HALF4 + cg];
                    l += pj;
                    [[unroll]] for (uint x = 0u; x < 4u; x++) {
                        oc[x] = fma(vec4(pj[x]), w0, oc[x]);
                        oc[4u + x] = fma(vec4(pj[x]), w1, oc[4u + x]);
                    }
                }
                l_run[a] = l;
                [[unroll]] for (uint x = 0u; x < 8u; x++) {
                    acc[a * 8u + x] = oc[x];
                }
            }
        }
        // The next tile overwrites ks, vs, ps, pmax and corr.
        barrier();
    }

    uint o_base = p.o_off + (b * p.q_len * p.q_heads + h) * HEAD_DIM;
    [[unroll]] for (uint a = 0u; a < PV_PER; a++) {
        uint t = tid + a * WORKGROUP_SIZE;
        if (t < PV_TILES) {
            uint cg = t % HALF4;
            uint rq = t / HALF4;
            [[unroll]] for (uint x = 0u; x < 4u; x++) {
                uint i = q0 + rq * 4u + x;
                float l = l_run[a][x];
                // l >= 1 once a key was seen (the maximum's own term is exp(0)).
                float inv = l > 0.0 ? div_rn(1.0, l) : 0.0;
                if (i < p.q_len) {
                    uint row = o_base + i * p.q_heads * HEAD_DIM;
                    [[unroll]] for (uint y = 0u; y < 4u; y++) {
                        uint d0 = cg * 4u + y;
                        uint d1 = DP / 2u + d0;
                        if (d0 < HEAD_DIM) {
                            o[row + d0] = acc[a * 8u + x][y] * inv;
                        }
                        if (d1 < HEAD_DIM) {
                            o[row + d1] = acc[a * 8u + 4u + x][y] * inv;
                        }
                    }
                }
            }
        }
    }
}
