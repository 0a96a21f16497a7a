#version 450
// y[m, n] = act(x[m, k] . w[n, k]^T + bias[n]) for few rows m (the weight-streaming regime:
// LLM2Vec at 16-64 tokens, MotionBricks at batch 1), in f32 arithmetic. Weights are f32, f16,
// bf16 or q8_0 (spec constant 3, the W_DTYPE codes of linear.comp), widened exactly to f32 on
// load.
//
// Each workgroup owns NC output columns (weight rows) and every row of y, MMAX rows at a time:
// its WORKGROUP_SIZE invocations split k, invocation i taking the groups of 4 k at
// 4 (i + j WORKGROUP_SIZE), j = 0, 1, ... (so one step of the workgroup reads 4 WORKGROUP_SIZE
// consecutive weights of each of its NC rows: coalesced, as vec4 where aligned), and holding
// MMAX x NC accumulators. The partial sums are then reduced through shared memory in a fixed
// order. The grid is one row of ceil(n / NC) workgroups, so the weights are streamed from
// memory once (again from cache for each further block of MMAX rows) by many workgroups.
//
// Summation order, the same on every device for a given WORKGROUP_SIZE (no subgroup
// operations, so not dependent on the subgroup size): invocation i sums its groups of 4 k in
// ascending order with f32 fma; the WORKGROUP_SIZE partials of an output are summed in Q
// consecutive slices of invocations (Q = max(1, WORKGROUP_SIZE / (MMAX NC))), each in
// ascending invocation order, and the Q slice sums are added in ascending order. This is a
// different order from linear.comp's tiled GEMM (one ascending sum over k), so the two kernels
// do not give the same bits: both are f32 sums of the same products, within the same error
// bound (k + 1) u sum |x w| (the host picks this kernel only for small m; see gemm_policy.rs).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
// Rows per block (the accumulators are MMAX x NC per invocation).
layout(constant_id = 1) const uint MMAX = 8;
// Output columns per workgroup.
layout(constant_id = 2) const uint NC = 4;
// 0 f32, 1 f16, 2 bf16, 3 q8_0
layout(constant_id = 3) const uint W_DTYPE = 0;
// 1 when bindings start on 16-byte boundaries (minStorageBufferOffsetAlignment a multiple of
// 16), so aligned groups of 4 can be read as vectors.
layout(constant_id = 4) const uint VEC_OK = 1;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { uint w[]; };
// The same bindings viewed as vectors, for the aligned loads.
layout(set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1) readonly buffer W4 { uvec4 w4[]; };
layout(set = 0, binding = 1) readonly buffer W2 { uvec2 w2[]; };
layout(set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    // elements for f32/f16/bf16, bytes for q8_0
    uint w_off;
    uint b_off;
    uint y_off;
    uint m;
    uint n;
    uint k;
    // elements between rows of y (the full n when the op is split over output columns)
    uint ldy;
    uint has_bias;
    uint act;
    float slope;
} p;

const uint OUT = MMAX * NC;
// Row stride of the partials: one float of padding so invocation i's writes (i OUTP + o)
// spread over the banks.
const uint OUTP = OUT + 1u;
const uint Q = WORKGROUP_SIZE > OUT ? WORKGROUP_SIZE / OUT : 1u;

shared float part[WORKGROUP_SIZE * OUTP];
shared float slices[Q * OUT];

float load_w(uint e) {
    if (W_DTYPE == 0u) {
        return uintBitsToFloat(w[p.w_off + e]);
    } else if (W_DTYPE == 1u) {
        return LOAD_F16(w, p.w_off + e);
    } else if (W_DTYPE == 2u) {
        return LOAD_BF16(w, p.w_off + e);
    }
    return LOAD_Q8_0(w, p.w_off, e);
}

bool x_vec() {
    return VEC_OK != 0u && p.k % 4u == 0u && p.x_off % 4u == 0u;
}

bool w_vec() {
    return VEC_OK != 0u && W_DTYPE <= 2u && p.k % 4u == 0u && p.w_off % 4u == 0u;
}

// x[row, gk .. gk + 3], zero past k (row < m).
vec4 load_x4(uint row, uint gk) {
    uint e = p.x_off + row * p.k + gk;
    if (x_vec()) {
        return x4[e >> 2u];
    }
    vec4 v;
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        v[c] = gk + c < p.k ? x[e + c] : 0.0;
    }
    return v;
}

// w[col, gk .. gk + 3] as f32, zero past k (col < n).
vec4 load_w4(uint col, uint gk) {
    uint e = col * p.k + gk;
    if (w_vec()) {
        if (W_DTYPE == 0u) {
            return uintBitsToFloat(w4[(p.w_off + e) >> 2u]);
        }
        uvec2 r = w2[(p.w_off + e) >> 2u];
        if (W_DTYPE == 1u) {
            return vec4(unpackHalf2x16(r.x), unpackHalf2x16(r.y));
        }
        // bf16: the top half of an f32 (element 2j is the low half of word j).
        return uintBitsToFloat(uvec4(r.x << 16u, r.x & 0xffff0000u, r.y << 16u,
                                     r.y & 0xffff0000u));
    }
    if (W_DTYPE == 3u) {
        // k is a multiple of 32 (whole blocks per row), so the 4 values share one block.
        uint blk = p.w_off + (e >> 5u) * Q8_0_BLOCK_BYTES;
        float d = Q8_0_SCALE(w, blk);
        vec4 v;
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            v[c] = d * Q8_0_QUANT(w, blk, (e & 31u) + c);
        }
        return v;
    }
    vec4 v;
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        v[c] = gk + c < p.k ? load_w(e + c) : 0.0;
    }
    return v;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint n0 = gl_WorkGroupID.x * NC;
    for (uint m0 = 0u; m0 < p.m; m0 += MMAX) {
        // acc[i * NC + j]: row m0 + i, column n0 + j.
        float acc[OUT];
        [[unroll]] for (uint o = 0u; o < OUT; o++) {
            acc[o] = 0.0;
        }
        for (uint gk = 4u * tid; gk < p.k; gk += 4u * WORKGROUP_SIZE) {
            vec4 wv[NC];
            [[unroll]] for (uint j = 0u; j < NC; j++) {
                wv[j] = n0 + j < p.n ? load_w4(n0 + j, gk) : vec4(0.0);
            }
            [[unroll]] for (uint i = 0u; i < MMAX; i++) {
                if (m0 + i < p.m) {
                    vec4 xv = load_x4(m0 + i, gk);
                    [[unroll]] for (uint j = 0u; j < NC; j++) {
                        float a = acc[i * NC + j];
                        [[unroll]] for (uint c = 0u; c < 4u; c++) {
                            a = fma(xv[c], wv[j][c], a);
                        }
                        acc[i * NC + j] = a;
                    }
                }
            }
        }
        [[unroll]] for (uint o = 0u; o < OUT; o++) {
            part[tid * OUTP + o] = acc[o];
        }
        barrier();
        // Slice q of output o: invocations q S .. min(q S + S, WORKGROUP_SIZE) - 1 in
        // ascending order.
        const uint S = (WORKGROUP_SIZE + Q - 1u) / Q;
        for (uint s = tid; s < Q * OUT; s += WORKGROUP_SIZE) {
            uint o = s % OUT;
            uint q = s / OUT;
            float v = 0.0;
            for (uint i = q * S; i < min(q * S + S, WORKGROUP_SIZE); i++) {
                v += part[i * OUTP + o];
            }
            slices[q * OUT + o] = v;
        }
        barrier();
        for (uint o = tid; o < OUT; o += WORKGROUP_SIZE) {
            uint row = m0 + o / NC;
            uint col = n0 + o % NC;
            if (row < p.m && col < p.n) {
                float v = 0.0;
                for (uint q = 0u; q < Q; q++) {
                    v += slices[q * OUT + o];
                }
                if (p.has_bias != 0u) {
                    v += bias[p.b_off + col];
                }
                y[p.y_off + row * p.ldy + col] = activate(p.act, p.slope, v);
            }
        }
        // The next row block overwrites the partials and slices.
        barrier();
    }
}
