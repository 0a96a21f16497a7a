#version 450
// c[z] = alpha * a[z] (m x k) . op(b[z]), op(B) = B (k x n) or B^T with B stored n x k
// (spec constant 6), f32 throughout: the tiled GEMM of linear.comp with a batch index on z.
// Each workgroup owns a BM x BN tile of one batch, each invocation TM x TN outputs strided
// across the tile; k advances BK at a time in ascending order, so every output sums its
// products in the same order on every device (no subgroup operations). Batch strides of a
// and b are in elements; 0 broadcasts one matrix to every batch.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;
// 0: b is k x n; 1: b is n x k (trans_b)
layout(constant_id = 6) const uint TRANS_B = 0;

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

// Transposed tiles: column kk of the a tile is contiguous, as is row kk of op(b). Rows are
// padded by one float: the loads below write a column (kk varying fastest) per group of
// invocations, which would otherwise hit one bank.
const uint AS = BM + 1u;
const uint BS = BN + 1u;
shared float as_[BK * AS];
shared float bs[BK * BS];

void main() {
    const uint COLS = BN / TN;
    const uint ROWS = BM / TM;
    uint tid = gl_LocalInvocationID.x;
    uint tr = tid / COLS;
    uint tc = tid % COLS;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    uint z = gl_WorkGroupID.z;
    uint a0 = p.a_off + z * p.a_stride;
    uint b0 = p.b_off + z * p.b_stride;

    float acc[TM * TN];
    [[unroll]] for (uint i = 0u; i < TM * TN; i++) {
        acc[i] = 0.0;
    }

    for (uint k0 = 0u; k0 < p.k; k0 += BK) {
        for (uint i = tid; i < BM * BK; i += WORKGROUP_SIZE) {
            uint r = i / BK;
            uint kk = i % BK;
            uint gr = m0 + r;
            uint gk = k0 + kk;
            as_[kk * AS + r] = (gr < p.m && gk < p.k) ? a[a0 + gr * p.k + gk] : 0.0;
        }
        // Consecutive invocations read consecutive elements of b in either layout.
        for (uint i = tid; i < BN * BK; i += WORKGROUP_SIZE) {
            uint col;
            uint kk;
            if (TRANS_B != 0u) {
                col = i / BK;
                kk = i % BK;
            } else {
                kk = i / BN;
                col = i % BN;
            }
            uint gc = n0 + col;
            uint gk = k0 + kk;
            float v = 0.0;
            if (gc < p.n && gk < p.k) {
                v = TRANS_B != 0u ? b[b0 + gc * p.k + gk] : b[b0 + gk * p.n + gc];
            }
            bs[kk * BS + col] = v;
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
            float av[TM];
            float bv[TN];
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                av[i] = as_[kk * AS + tr + i * ROWS];
            }
            [[unroll]] for (uint j = 0u; j < TN; j++) {
                bv[j] = bs[kk * BS + tc + j * COLS];
            }
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                [[unroll]] for (uint j = 0u; j < TN; j++) {
                    acc[i * TN + j] = fma(av[i], bv[j], acc[i * TN + j]);
                }
            }
        }
        barrier();
    }

    uint c0 = p.c_off + z * p.m * p.n;
    for (uint i = 0u; i < TM; i++) {
        uint row = m0 + tr + i * ROWS;
        if (row >= p.m) {
            continue;
        }
        for (uint j = 0u; j < TN; j++) {
            uint col = n0 + tc + j * COLS;
            if (col < p.n) {
                c[c0 + row * p.n + col] = p.alpha * acc[i * TN + j];
            }
        }
    }
}
