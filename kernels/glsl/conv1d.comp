#version 450
// 1-D convolution, stride 1, zero padding, dilation (PyTorch Conv1d layout):
// y[b, co, t] = bias[co] + sum_{ci, kk} w[co, ci, kk] x[b, ci, t + kk dilation - padding].
// An implicit GEMM: rows are output channels, columns are (batch, t) pairs, the reduction runs
// over r = ci * kernel + kk (the weight's row layout), and the x tile is gathered on the fly
// (im2col in shared memory) with zeros outside the input. Tiled as linear.comp: each workgroup
// owns a BM x BN output tile, r advances BK at a time in ascending order and every output sums
// its products with f32 fma in that one order on every device (no subgroup operations).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 32;
layout(constant_id = 2) const uint BN = 32;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint TM = 2;
layout(constant_id = 5) const uint TN = 2;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { float w[]; };
layout(set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint w_off;
    uint b_off;
    uint y_off;
    uint batch;
    uint c_in;
    uint c_out;
    uint len;
    uint kernel;
    uint padding;
    uint dilation;
    uint out_len;
    uint has_bias;
} p;

// Transposed tiles: row kk of each is contiguous across the tile's outputs.
shared float ws[BK * BM];
shared float xs[BK * BN];

void main() {
    const uint COLS = BN / TN;
    const uint ROWS = BM / TM;
    uint tid = gl_LocalInvocationID.x;
    uint tr = tid / COLS;
    uint tc = tid % COLS;
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    uint red = p.c_in * p.kernel;
    uint ncols = p.batch * p.out_len;

    float acc[TM * TN];
    for (uint i = 0u; i < TM * TN; i++) {
        acc[i] = 0.0;
    }

    for (uint k0 = 0u; k0 < red; k0 += BK) {
        for (uint i = tid; i < BM * BK; i += WORKGROUP_SIZE) {
            uint r = i / BK;
            uint kk = i % BK;
            uint gr = m0 + r;
            uint gk = k0 + kk;
            ws[kk * BM + r] = (gr < p.c_out && gk < red) ? w[p.w_off + gr * red + gk] : 0.0;
        }
        for (uint i = tid; i < BN * BK; i += WORKGROUP_SIZE) {
            uint c = i / BK;
            uint kk = i % BK;
            uint gc = n0 + c;
            uint gk = k0 + kk;
            float v = 0.0;
            if (gc < ncols && gk < red) {
                uint b = gc / p.out_len;
                uint t = gc % p.out_len;
                uint ci = gk / p.kernel;
                uint tap = gk % p.kernel;
                // Position in the padded input; in range when padding <= s < padding + len.
                uint s = t + tap * p.dilation;
                if (s >= p.padding && s - p.padding < p.len) {
                    v = x[p.x_off + (b * p.c_in + ci) * p.len + (s - p.padding)];
                }
            }
            xs[kk * BN + c] = v;
        }
        barrier();
        for (uint kk = 0u; kk < BK; kk++) {
            float a[TM];
            float bv[TN];
            for (uint i = 0u; i < TM; i++) {
                a[i] = ws[kk * BM + tr + i * ROWS];
            }
            for (uint j = 0u; j < TN; j++) {
                bv[j] = xs[kk * BN + tc + j * COLS];
            }
            for (uint i = 0u; i < TM; i++) {
                for (uint j = 0u; j < TN; j++) {
                    acc[i * TN + j] = fma(a[i], bv[j], acc[i * TN + j]);
                }
            }
        }
        barrier();
    }

    for (uint i = 0u; i < TM; i++) {
        uint co = m0 + tr + i * ROWS;
        if (co >= p.c_out) {
            continue;
        }
        for (uint j = 0u; j < TN; j++) {
            uint col = n0 + tc + j * COLS;
            if (col >= ncols) {
                continue;
            }
            uint b = col / p.out_len;
            uint t = col % p.out_len;
            float v = acc[i * TN + j];
            if (p.has_bias != 0u) {
                v += bias[p.b_off + co];
            }
            y[p.y_off + (b * p.c_out + co) * p.out_len + t] = v;
        }
    }
}
