#version 450
// c[z] = alpha * a[z] (m x k) . op(b[z]), op(B) = B (k x n) or B^T with B stored n x k
// (spec constant 6), f32 throughout: the register-blocked tile of gemm_f32.glsl (every output
// sums k in ascending order) with the batch on z. Both layouts of b are loaded with
// consecutive invocations on consecutive addresses (k fastest for B^T, n fastest otherwise).
// Batch strides of a and b are in elements; 0 broadcasts one matrix to every batch.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 8;
layout(constant_id = 4) const uint TM = 8;
layout(constant_id = 5) const uint TN = 8;
// 0: b is k x n; 1: b is n x k (trans_b)
layout(constant_id = 6) const uint TRANS_B = 0;
const bool B_K_CONTIGUOUS = TRANS_B != 0u;

layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer C { float c[]; };

layout(push_constant) uniform Push {
    uint a_off;
    uint b_off;
    uint c_off;
    uint m;
    uint n;
    uint k;
    uint a_stride;
    uint b_stride;
    float alpha;
} p;

uint m0;
uint n0;
uint a0;
uint b0;
uint c0;

float load_a(uint r, uint kk) {
    uint gr = m0 + r;
    return (gr < p.m && kk < p.k) ? a[a0 + gr * p.k + kk] : 0.0;
}

float load_b(uint col, uint kk) {
    uint gc = n0 + col;
    if (gc >= p.n || kk >= p.k) {
        return 0.0;
    }
    return TRANS_B != 0u ? b[b0 + gc * p.k + kk] : b[b0 + kk * p.n + gc];
}

void store_c(uint r, uint col, float v) {
    uint row = m0 + r;
    uint gc = n0 + col;
    if (row < p.m && gc < p.n) {
        c[c0 + row * p.n + gc] = p.alpha * v;
    }
}

#include "gemm_f32.glsl"

void main() {
    m0 = gl_WorkGroupID.y * BM;
    n0 = gl_WorkGroupID.x * BN;
    uint z = gl_WorkGroupID.z;
    a0 = p.a_off + z * p.a_stride;
    b0 = p.b_off + z * p.b_stride;
    c0 = p.c_off + z * p.m * p.n;
    gemm_f32();
}
