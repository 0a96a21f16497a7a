#version 450
// y[m, n] = act(x[m, k] . w[n, k]^T + bias[n]) with f32 accumulation: a tiled GEMM through
// shared memory. Each workgroup owns a BM x BN output tile, each invocation TM x TN outputs
// strided across the tile; k advances BK at a time in ascending order, so every output sums
// its products in the same order on every device (no subgroup operations: any subgroup size).
// Weights are f32, f16, bf16 or q8_0 (spec constant 6), widened exactly to f32 on load.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint TM = 4;
layout(constant_id = 5) const uint TN = 4;
// 0 f32, 1 f16, 2 bf16, 3 q8_0
layout(constant_id = 6) const uint W_DTYPE = 0;

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

// Transposed tiles: column kk of the x tile is contiguous, as is column kk of the w tile.
shared float xs[BK * BM];
shared float ws[BK * BN];

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

void main() {
    const uint COLS = BN / TN;
    const uint ROWS = BM / TM;
    uint tid = gl_LocalInvocationID.x;
    uint tr = tid / COLS;
    uint tc = tid % COLS;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;

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
            xs[kk * BM + r] = (gr < p.m && gk < p.k) ? x[p.x_off + gr * p.k + gk] : 0.0;
        }
        for (uint i = tid; i < BN * BK; i += WORKGROUP_SIZE) {
            uint c = i / BK;
            uint kk = i % BK;
            uint gc = n0 + c;
            uint gk = k0 + kk;
            ws[kk * BN + c] = (gc < p.n && gk < p.k) ? load_w(gc * p.k + gk) : 0.0;
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
            float a[TM];
            float b[TN];
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                a[i] = xs[kk * BM + tr + i * ROWS];
            }
            [[unroll]] for (uint j = 0u; j < TN; j++) {
                b[j] = ws[kk * BN + tc + j * COLS];
            }
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                [[unroll]] for (uint j = 0u; j < TN; j++) {
                    acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
                }
            }
        }
        barrier();
    }

    for (uint i = 0u; i < TM; i++) {
        uint row = m0 + tr + i * ROWS;
        if (row >= p.m) {
            continue;
        }
        for (uint j = 0u; j < TN; j++) {
            uint col = n0 + tc + j * COLS;
            if (col >= p.n) {
                continue;
            }
            float v = acc[i * TN + j];
            if (p.has_bias != 0u) {
                v += bias[p.b_off + col];
            }
            y[p.y_off + row * p.ldy + col] = activate(p.act, p.slope, v);
        }
    }
}
