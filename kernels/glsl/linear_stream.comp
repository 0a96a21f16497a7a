#version 450
// y[m, n] = act(x[m, k] . w[n, k]^T + bias[n]) for few rows m (1..64) and large k x n: the
// weight-streaming regime of LLM2Vec at 16-64 tokens, where each weight is used m times and the
// time is the time to read the weights once. Weights are f32, f16, bf16 or q8_0 (W_DTYPE, the
// codes of linear.comp), widened exactly to f32 in registers; arithmetic is f32 FMA.
//
// Work split: a workgroup owns NCW = (WORKGROUP_SIZE / LK) CPI output columns (weight rows) and
// one slice of k (split s = gl_WorkGroupID.y covers k in [s ks, s ks + ks)). Its invocations
// form WORKGROUP_SIZE / LK column groups of LK lanes; group g owns columns n0 + g + j G
// (j < CPI, G the group count) and its lane l reads 8 consecutive k of each at
// kk = l 8 + i LK 8, one 16-byte load (uvec4 of 8 bf16/f16 values, two vec4 of f32, or the 8
// quants of a q8_0 block plus its scale): the LK lanes of a column read LK 16 consecutive bytes
// of its row, and every weight element is read once per row block. The x rows of the block
// (MB at a time) are staged in shared memory KT k at a time and read back as vec4 by every
// column group (the same addresses across groups: broadcasts). Each invocation holds MB x CPI
// accumulators.
//
// With one split (ks >= k, `epilogue` 1) the workgroup adds the bias, applies the activation
// and writes y; with several it writes its partial sums to a scratch array part[split][m][n].
// Then either linear_stream_reduce.comp sums the splits in ascending order and applies the
// epilogue (`fold` 0), or (`fold` 1) each workgroup counts itself in on its column group's
// arrival counter after its partial sums are visible, and the last of the group's splits to
// arrive sums the group's columns over the splits in the reduce kernel's order (so the bits
// are the same) and writes y, then resets the counter to zero for the next run: one dispatch
// instead of two, and no barrier between them. The counter and the partial sums are
// `coherent` (read from where the other workgroups' writes land, not a stale cache).
//
// Summation order (fixed for a given tile, independent of the subgroup size and of
// scheduling): lane l sums its products in ascending k with f32 fma; the LK lane sums of an
// output are added in ascending lane order (from 0.0); then the split sums in ascending split
// order, then the bias. This is not linear.comp's order (one ascending sum over k), so the
// kernels differ in bits, within the same f32 error bound (k + 1) u sum |x w|.
//
// With CONV defined (the conv1d_stream module) the same kernel is conv1d.comp's implicit GEMM
// for few output columns: row r = (b, t) of x is the im2col row of output position t of batch
// b (x[b, ci, t + tap dilation - padding], zero outside the input, at reduction index
// ci kernel + tap, gathered while staging), the weights are the f32 `[c_out, c_in kernel]`
// rows (n = c_out, k = c_in kernel, m = batch out_len), and y (and the reduce's y) is
// `[batch, c_out, out_len]`. The MotionBricks decoders' convolutions have 15-60 output
// positions at batch 1 over 1536 products: the tiled conv1d leaves most of the GPU idle there.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
// Rows per block (at most 32; m beyond it walks further blocks, reading the weights again).
layout(constant_id = 1) const uint MB = 32;
// Columns per invocation.
layout(constant_id = 2) const uint CPI = 2;
// Lanes sharing a column (splitting its k in runs of 8).
layout(constant_id = 3) const uint LK = 4;
// k staged in shared memory at a time: a multiple of 8 LK.
layout(constant_id = 4) const uint KT = 128;
// Accumulators reduced across lanes per round (divides MB CPI).
layout(constant_id = 5) const uint RC = 16;
// 0 f32, 1 f16, 2 bf16, 3 q8_0
layout(constant_id = 6) const uint W_DTYPE = 2;
// 1 when bindings start on 16-byte boundaries (minStorageBufferOffsetAlignment a multiple of
// 16), so aligned runs can be read as vectors.
layout(constant_id = 7) const uint VEC_OK = 1;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1) readonly buffer W { uint w[]; };
layout(set = 0, binding = 1) readonly buffer W4 { uvec4 w4[]; };
layout(set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };
// The partial sums [split][m][n] (several splits).
layout(set = 0, binding = 4) coherent buffer Part { float part[]; };
// One arrival counter per column group (`fold` 1): zero between runs.
layout(set = 0, binding = 5) coherent buffer Count { uint count[]; };

layout(push_constant) uniform Push {
    uint x_off;
    // elements for f32/f16/bf16, bytes for q8_0
    uint w_off;
    uint b_off;
    // y, or the partial sums when epilogue is 0
    uint y_off;
    uint part_off;
    uint count_off;
    uint m;
    uint n;
    uint k;
    // elements between rows of y (the full n when the op is split over output columns)
    uint ldy;
    // k per split: a multiple of KT (every split but the last is whole)
    uint ks;
    // 1: add the bias, activate and write y; 0: write partial sums [split][m][n]
    uint epilogue;
    uint has_bias;
    uint act;
    float slope;
    // with epilogue 0: 1 = the last workgroup of each column group reduces the splits
    uint fold;
#ifdef CONV
    uint batch;
    uint c_in;
    uint len;
    uint kernel;
    uint padding;
    uint dilation;
    uint out_len;
#endif
} p;

const uint G = WORKGROUP_SIZE / LK;
const uint NCW = G * CPI;
const uint OUT = MB * CPI;
const uint STEP = 8u * LK;
const uint KT4 = KT / 4u;

shared vec4 xs[MB * KT4];
shared float red[RC * WORKGROUP_SIZE];

float load_w(uint e) {
    if (W_DTYPE == 0u) {
        return uintBitsToFloat(w[p.w_off + e]);
    } else if (W_DTYPE == 1u) {
        return LOAD_F16(w, p.w_off + e);
    }
    return LOAD_BF16(w, p.w_off + e);
}

// The 8 int8 quants starting at byte b (sign-extended), as two vec4.
void q8_quants(uint b, out vec4 a, out vec4 c) {
    uint wi = b >> 2u;
    uint sh = (b & 3u) * 8u;
    uint w0 = w[wi];
    uint w1 = w[wi + 1u];
    uint lo = w0;
    uint hi = w1;
    if (sh != 0u) {
        uint w2 = w[wi + 2u];
        lo = (w0 >> sh) | (w1 << (32u - sh));
        hi = (w1 >> sh) | (w2 << (32u - sh));
    }
    a = vec4(ivec4(int(lo << 24u) >> 24, int(lo << 16u) >> 24, int(lo << 8u) >> 24,
                   int(lo) >> 24));
    c = vec4(ivec4(int(hi << 24u) >> 24, int(hi << 16u) >> 24, int(hi << 8u) >> 24,
                   int(hi) >> 24));
}

// w[col, kk .. kk + 7] as f32, zero past k (kk a multiple of 8, col < n).
void load_w8(uint col, uint kk, out vec4 a, out vec4 c) {
    uint e = col * p.k + kk;
    if (W_DTYPE == 3u) {
        // k is a multiple of 32 (whole blocks per row), so the 8 values share one block.
        uint blk = p.w_off + (e >> 5u) * Q8_0_BLOCK_BYTES;
        float d = Q8_0_SCALE(w, blk);
        q8_quants(blk + 2u + (e & 31u), a, c);
        a *= d;
        c *= d;
        return;
    }
    uint we = p.w_off + e;
    if (VEC_OK != 0u && p.k % 8u == 0u) {
        if (W_DTYPE == 0u && p.w_off % 4u == 0u) {
            a = uintBitsToFloat(w4[we >> 2u]);
            c = uintBitsToFloat(w4[(we >> 2u) + 1u]);
            return;
        }
        if (W_DTYPE != 0u && p.w_off % 8u == 0u) {
            uvec4 r = w4[we >> 3u];
            if (W_DTYPE == 1u) {
                a = vec4(unpackHalf2x16(r.x), unpackHalf2x16(r.y));
                c = vec4(unpackHalf2x16(r.z), unpackHalf2x16(r.w));
            } else {
                // bf16: the top half of an f32 (element 2j is the low half of word j).
                a = uintBitsToFloat(uvec4(r.x << 16u, r.x & 0xffff0000u, r.y << 16u,
                                          r.y & 0xffff0000u));
                c = uintBitsToFloat(uvec4(r.z << 16u, r.z & 0xffff0000u, r.w << 16u,
                                          r.w & 0xffff0000u));
            }
            return;
        }
    }
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        a[i] = kk + i < p.k ? load_w(e + i) : 0.0;
        c[i] = kk + 4u + i < p.k ? load_w(e + 4u + i) : 0.0;
    }
}

// The 8 weights at kk of each of the invocation's columns col0 + j G (zero past n, and all
// zero when `live` is false: past the stage).
void load_step(uint col0, uint kk, bool live, out vec4 a[CPI], out vec4 c[CPI]) {
    [[unroll]] for (uint j = 0u; j < CPI; j++) {
        uint col = col0 + j * G;
        if (live && col < p.n) {
            load_w8(col, kk, a[j], c[j]);
        } else {
            a[j] = vec4(0.0);
            c[j] = vec4(0.0);
        }
    }
}

#ifdef CONV
// The im2col row `row` = (b, t) at reduction indices kk .. kk + 3 (ci kernel + tap): zero past
// kend, past m, and where the tap falls in the padding.
vec4 load_x4(uint row, uint kk, uint kend) {
    vec4 v = vec4(0.0);
    if (row >= p.m) {
        return v;
    }
    uint b = row / p.out_len;
    uint t = row % p.out_len;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        uint r = kk + i;
        if (r < kend) {
            uint ci = r / p.kernel;
            // Position in the padded input; in range when padding <= s < padding + len.
            uint s = t + (r % p.kernel) * p.dilation;
            if (s >= p.padding && s - p.padding < p.len) {
                v[i] = x[p.x_off + (b * p.c_in + ci) * p.len + (s - p.padding)];
            }
        }
    }
    return v;
}

// Where output (row, col) goes: y[b, col, t] for row = (b, t).
#define Y_INDEX(row, col) (p.y_off + ((row) / p.out_len * p.n + (col)) * p.out_len + (row) % p.out_len)
#else
// Where output (row, col) goes.
#define Y_INDEX(row, col) (p.y_off + (row) * p.ldy + (col))

// x[row, kk .. kk + 3], zero past kend and past m.
vec4 load_x4(uint row, uint kk, uint kend) {
    if (row >= p.m) {
        return vec4(0.0);
    }
    uint e = p.x_off + row * p.k + kk;
    if (VEC_OK != 0u && p.k % 4u == 0u && p.x_off % 4u == 0u && kk + 4u <= kend) {
        return x4[e >> 2u];
    }
    vec4 v;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        v[i] = kk + i < kend ? x[e + i] : 0.0;
    }
    return v;
}
#endif

// The lane sums are done with red when the splits fold.
#define FOLD_FLAG red[0]
#include "stream_fold.glsl"

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint lane = tid % LK;
    uint g = tid / LK;
    uint n0 = gl_WorkGroupID.x * NCW;
    uint split = gl_WorkGroupID.y;
    uint kbeg = split * p.ks;
    uint kend = min(p.k, kbeg + p.ks);
    for (uint m0 = 0u; m0 < p.m; m0 += MB) {
        // acc[i * CPI + j]: row m0 + i, column n0 + g + j G.
        float acc[OUT];
        [[unroll]] for (uint o = 0u; o < OUT; o++) {
            acc[o] = 0.0;
        }
        for (uint k0 = kbeg; k0 < kend; k0 += KT) {
            // The previous stage (or row block's reduction) is done with xs.
            barrier();
            for (uint i = tid; i < MB * KT4; i += WORKGROUP_SIZE) {
                uint r = i / KT4;
                xs[i] = load_x4(m0 + r, k0 + 4u * (i % KT4), kend);
            }
            barrier();
            uint kt = min(KT, kend - k0);
            // The weights of the next step are loaded before this step's FMAs (two steps of
            // loads in flight per invocation).
            vec4 na[CPI];
            vec4 nc[CPI];
            load_step(n0 + g, k0 + 8u * lane, 8u * lane < kt, na, nc);
            for (uint kk = 8u * lane; kk < kt; kk += STEP) {
                vec4 wa[CPI];
                vec4 wc[CPI];
                [[unroll]] for (uint j = 0u; j < CPI; j++) {
                    wa[j] = na[j];
                    wc[j] = nc[j];
                }
                load_step(n0 + g, k0 + kk + STEP, kk + STEP < kt, na, nc);
                [[unroll]] for (uint i = 0u; i < MB; i++) {
                    if (m0 + i < p.m) {
                        vec4 xa = xs[i * KT4 + (kk >> 2u)];
                        vec4 xc = xs[i * KT4 + (kk >> 2u) + 1u];
                        [[unroll]] for (uint j = 0u; j < CPI; j++) {
                            float s = acc[i * CPI + j];
                            s = fma(xa.x, wa[j].x, s);
                            s = fma(xa.y, wa[j].y, s);
                            s = fma(xa.z, wa[j].z, s);
                            s = fma(xa.w, wa[j].w, s);
                            s = fma(xc.x, wc[j].x, s);
                            s = fma(xc.y, wc[j].y, s);
                            s = fma(xc.z, wc[j].z, s);
                            s = fma(xc.w, wc[j].w, s);
                            acc[i * CPI + j] = s;
                        }
                    }
                }
            }
        }
        // Lane sums of RC accumulators at a time through shared memory.
        [[unroll]] for (uint o0 = 0u; o0 < OUT; o0 += RC) {
            barrier();
            [[unroll]] for (uint i = 0u; i < RC; i++) {
                red[i * WORKGROUP_SIZE + tid] = acc[o0 + i];
            }
            barrier();
            for (uint idx = tid; idx < RC * G; idx += WORKGROUP_SIZE) {
                uint i = idx / G;
                uint gg = idx % G;
                uint o = o0 + i;
                uint row = m0 + o / CPI;
                uint col = n0 + gg + (o % CPI) * G;
                if (row < p.m && col < p.n) {
                    float v = 0.0;
                    for (uint l = 0u; l < LK; l++) {
                        v += red[i * WORKGROUP_SIZE + gg * LK + l];
                    }
                    if (p.epilogue != 0u) {
                        if (p.has_bias != 0u) {
                            v += bias[p.b_off + col];
                        }
                        y[Y_INDEX(row, col)] = activate(p.act, p.slope, v);
                    } else {
                        part[p.part_off + (split * p.m + row) * p.n + col] = v;
                    }
                }
            }
        }
    }
    fold_splits(n0, NCW, 0u, p.m);
}
