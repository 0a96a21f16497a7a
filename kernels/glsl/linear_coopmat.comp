#version 450
// Fast-mode linear: y[m, n] = act(x[m, k] . w[n, k]^T + bias[n]) on cooperative matrices
// (VK_KHR_cooperative_matrix, SPIR-V 1.6): f16 operands, f32 accumulation. x (f32) and the
// weights (f32, f16, bf16 or q8_0, spec constant 6) are rounded to f16 when staged to shared
// memory (f16 weights exactly; bf16 and f32 to the nearest f16, overflowing to infinity past
// 65504). Products of f16 are exact in f32, so the only rounding beyond the f32 sums is that
// of the inputs.
//
// One workgroup computes a BM x BN tile with (BM / WM) (BN / WN) subgroups, each a WM x WN
// block of CM x CN accumulators; k advances BK at a time. The global loads of tile t + 1 go
// to registers before the products of tile t (one shared buffer, two barriers per tile). Rows
// of the shared tiles are padded by 8 halves (16 bytes) so the matrix loads of consecutive
// rows start on different banks. Each invocation moves groups of 4 consecutive k: one 16-byte
// (x, f32 weights) or 8-byte (f16, bf16 weights) load when k and the operand's offset allow
// it (uniform branches), element loads otherwise (and for q8_0). Results leave through a per-subgroup CM x CN f32 staging
// block, where bias, activation and the m/n edges are applied.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const uint WM = 64;
layout(constant_id = 5) const uint WN = 32;
// 0 f32, 1 f16, 2 bf16, 3 q8_0
layout(constant_id = 6) const uint W_DTYPE = 0;
// The device's cooperative-matrix shape (m x n x k) and subgroup size.
layout(constant_id = 7) const uint CM = 16;
layout(constant_id = 8) const uint CN = 16;
layout(constant_id = 9) const uint CK = 16;
layout(constant_id = 10) const uint SG = 32;
// 1 when bindings start on 16-byte boundaries (minStorageBufferOffsetAlignment a multiple of
// 16), so the vector views below are aligned with the scalar ones.
layout(constant_id = 11) const uint VEC_OK = 1;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { uint w[]; };
// The same bindings viewed as vectors, for the aligned loads.
layout(set = 0, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1) readonly buffer W4 { vec4 w4[]; };
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

// Shared rows in f16vec4 units (BK + 8 halves).
const uint ST4 = BK / 4u + 2u;
const uint KQ = BK / 4u;
const uint A_LOADS = BM * KQ / WORKGROUP_SIZE;
const uint B_LOADS = BN * KQ / WORKGROUP_SIZE;
const uint FM = WM / CM;
const uint FN = WN / CN;
const uint WARPS_N = BN / WN;
const uint WARPS = (BM / WM) * WARPS_N;

shared f16vec4 as_[BM * ST4];
shared f16vec4 bs_[BN * ST4];
shared float stage[WARPS * CM * CN];

vec4 a_reg[A_LOADS];
vec4 b_reg[B_LOADS];

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

// Whether the groups of 4 k can be read as vectors (k and the offsets multiples of 4).
bool a_vec() {
    return VEC_OK != 0u && p.k % 4u == 0u && p.x_off % 4u == 0u;
}

bool b_vec() {
    return VEC_OK != 0u && W_DTYPE <= 2u && p.k % 4u == 0u && p.w_off % 4u == 0u;
}

vec4 load_a4(uint gr, uint gk) {
    if (gr >= p.m) {
        return vec4(0.0);
    }
    uint e = p.x_off + gr * p.k + gk;
    if (a_vec()) {
        return gk < p.k ? x4[e >> 2u] : vec4(0.0);
    }
    vec4 v;
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        v[c] = gk + c < p.k ? x[e + c] : 0.0;
    }
    return v;
}

vec4 load_b4(uint gc, uint gk) {
    if (gc >= p.n) {
        return vec4(0.0);
    }
    uint e = gc * p.k + gk;
    if (b_vec()) {
        if (gk >= p.k) {
            return vec4(0.0);
        }
        if (W_DTYPE == 0u) {
            return w4[(p.w_off + e) >> 2u];
        }
        uvec2 h = w2[(p.w_off + e) >> 2u];
        if (W_DTYPE == 1u) {
            return vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
        }
        // bf16: the top half of an f32 (element 2j is the low half of word j).
        return uintBitsToFloat(uvec4(h.x << 16u, h.x & 0xffff0000u, h.y << 16u,
                                     h.y & 0xffff0000u));
    }
    vec4 v;
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        v[c] = gk + c < p.k ? load_w(e + c) : 0.0;
    }
    return v;
}

void load_tile(uint m0, uint n0, uint k0) {
    [[unroll]] for (uint l = 0u; l < A_LOADS; l++) {
        uint i = gl_LocalInvocationID.x + l * WORKGROUP_SIZE;
        a_reg[l] = load_a4(m0 + i / KQ, k0 + 4u * (i % KQ));
    }
    [[unroll]] for (uint l = 0u; l < B_LOADS; l++) {
        uint i = gl_LocalInvocationID.x + l * WORKGROUP_SIZE;
        b_reg[l] = load_b4(n0 + i / KQ, k0 + 4u * (i % KQ));
    }
}

void store_tile() {
    [[unroll]] for (uint l = 0u; l < A_LOADS; l++) {
        uint i = gl_LocalInvocationID.x + l * WORKGROUP_SIZE;
        as_[(i / KQ) * ST4 + i % KQ] = f16vec4(a_reg[l]);
    }
    [[unroll]] for (uint l = 0u; l < B_LOADS; l++) {
        uint i = gl_LocalInvocationID.x + l * WORKGROUP_SIZE;
        bs_[(i / KQ) * ST4 + i % KQ] = f16vec4(b_reg[l]);
    }
}

void main() {
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    uint warp = gl_SubgroupID;
    uint wm = (warp / WARPS_N) * WM;
    uint wn = (warp % WARPS_N) * WN;

    coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator> acc[FM * FN];
    [[unroll]] for (uint i = 0u; i < FM * FN; i++) {
        acc[i] = coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator>(0.0);
    }

    uint tiles = (p.k + BK - 1u) / BK;
    if (tiles > 0u) {
        load_tile(m0, n0, 0u);
    }
    for (uint t = 0u; t < tiles; t++) {
        store_tile();
        barrier();
        if (t + 1u < tiles) {
            load_tile(m0, n0, (t + 1u) * BK);
        }
        [[unroll]] for (uint kk = 0u; kk < BK; kk += CK) {
            coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA> a[FM];
            coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB> b[FN];
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                coopMatLoad(a[i], as_, (wm + i * CM) * ST4 + kk / 4u, ST4,
                            gl_CooperativeMatrixLayoutRowMajor);
            }
            // Column j of B is row j of the n-major tile.
            [[unroll]] for (uint j = 0u; j < FN; j++) {
                coopMatLoad(b[j], bs_, (wn + j * CN) * ST4 + kk / 4u, ST4,
                            gl_CooperativeMatrixLayoutColumnMajor);
            }
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                [[unroll]] for (uint j = 0u; j < FN; j++) {
                    acc[i * FN + j] = coopMatMulAdd(a[i], b[j], acc[i * FN + j]);
                }
            }
        }
        barrier();
    }

    uint base = warp * CM * CN;
    uint lane = gl_SubgroupInvocationID;
    [[unroll]] for (uint i = 0u; i < FM; i++) {
        [[unroll]] for (uint j = 0u; j < FN; j++) {
            coopMatStore(acc[i * FN + j], stage, base, CN, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane; e < CM * CN; e += SG) {
                uint row = m0 + wm + i * CM + e / CN;
                uint col = n0 + wn + j * CN + e % CN;
                if (row < p.m && col < p.n) {
                    float v = stage[base + e];
                    if (p.has_bias != 0u) {
                        v += bias[p.b_off + col];
                    }
                    y[p.y_off + row * p.ldy + col] = activate(p.act, p.slope, v);
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
    }
}
