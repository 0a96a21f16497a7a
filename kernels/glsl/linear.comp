#version 450
// y[m, n] = act(x[m, k] . w[n, k]^T + bias[n]) with f32 arithmetic: the register-blocked
// tile of gemm_f32.glsl (every output sums k in ascending order). Weights are f32, f16, bf16
// or q8_0 (spec constant 6), widened exactly to f32 on load.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 8;
layout(constant_id = 4) const uint TM = 8;
layout(constant_id = 5) const uint TN = 8;
// 0 f32, 1 f16, 2 bf16, 3 q8_0
layout(constant_id = 6) const uint W_DTYPE = 0;
// Both operands are read along k (w is stored n x k).
const bool B_K_CONTIGUOUS = true;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { uint w[]; };
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

uint m0;
uint n0;

float load_a(uint r, uint kk) {
    uint gr = m0 + r;
    return (gr < p.m && kk < p.k) ? x[p.x_off + gr * p.k + kk] : 0.0;
}

float load_b(uint c, uint kk) {
    uint gc = n0 + c;
    return (gc < p.n && kk < p.k) ? load_w(gc * p.k + kk) : 0.0;
}

void store_c(uint r, uint c, float v) {
    uint row = m0 + r;
    uint col = n0 + c;
    if (row < p.m && col < p.n) {
        if (p.has_bias != 0u) {
            v += bias[p.b_off + col];
        }
        y[p.y_off + row * p.ldy + col] = activate(p.act, p.slope, v);
    }
}

#include "gemm_f32.glsl"

void main() {
    m0 = gl_WorkGroupID.y * BM;
    n0 = gl_WorkGroupID.x * BN;
    gemm_f32();
}
