// Fast-mode linear y = act(x W^T + bias) on workgroup-scope cooperative matrices
// (VK_NV_cooperative_matrix2): the whole BM x BN output tile of a workgroup is one
// accumulator, and the operands are read straight from the storage buffers through tensor
// layouts (no shared-memory staging written by us: the driver stages and schedules, which is
// what it can do better than subgroup-scope code on NVIDIA's tensor cores).
// Same contract and rounding as linear_cm.glsl: x and f32 weights are rounded to the nearest
// f16, f16 weights are exact, products are summed in f32; only the order of the sums differs.
// The host runs it for f32 and f16 weights (bf16 and q8_0 take linear_cm.glsl) when the
// device has the extension with workgroup scope, flexible dimensions, conversions,
// per-element operations and tensor addressing.
//
// Edges: tiles wholly inside the operands (with k a multiple of BK) read through plain
// layouts; the others through layouts that clamp to the m x k and n x k extents with the
// constant 0, so reads past the end of k add nothing. The store clamps to m x n, dropping
// what lies outside.
// x [m, k] and W [n, k] are row-major; B = W^T is read through a transposing view. y has ldy
// elements per row (the full n when the host splits the op over column groups).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
// The output tile and the k step: workgroup-scope matrices may be sized by specialization
// constants (the driver lays them out when the pipeline is created).
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;
// 0 f32, 1 f16
layout(constant_id = 6) const uint W_DTYPE = 1;
#ifndef INTERIOR
#define INTERIOR 1u
#endif

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { float w[]; };
layout(set = 0, binding = 1) readonly buffer W16 { float16_t w16[]; };
layout(set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    // elements of the weight type
    uint w_off;
    uint b_off;
    uint y_off;
    uint m;
    uint n;
    uint k;
    uint ldy;
    uint has_bias;
    uint act;
    float slope;
} p;

// Bias and activation of the element at (r, c) of the tile whose first column is n0.
float epilogue(const in uint r, const in uint c, const in float v, const in uint n0) {
    uint col = n0 + c;
    float s = v;
    if (p.has_bias != 0u && col < p.n) {
        s += bias[p.b_off + col];
    }
    return activate(p.act, p.slope, s);
}

// One k step of BK: the x and W tiles through the layouts LX and LW, rounded to f16 (f32
// elements load as an f32 matrix and convert: loading them straight into an f16 matrix does
// not convert on the H200's driver), then the product into acc.
#define K_STEP(LX, LW, K0) \
    { \
        coopmat<float, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseAccumulator> xf; \
        coopMatLoadTensorNV(xf, x, p.x_off, sliceTensorLayoutNV(LX, m0, BM, K0, BK)); \
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a = \
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>(xf); \
        coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b; \
        if (W_DTYPE == 1u) { \
            coopMatLoadTensorNV(b, w16, p.w_off, sliceTensorLayoutNV(LW, n0, BN, K0, BK), \
                                transpose); \
        } else { \
            coopmat<float, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseAccumulator> wf; \
            coopMatLoadTensorNV(wf, w, p.w_off, sliceTensorLayoutNV(LW, n0, BN, K0, BK), \
                                transpose); \
            b = coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>(wf); \
        } \
        acc = coopMatMulAdd(a, b, acc); \
    }

#ifndef UNROLL
// k steps per iteration of the interior loop, unrolled so the driver can issue the loads of
// several steps before their products.
#define UNROLL 8u
#endif

void main() {
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);

    if (INTERIOR != 0u && m0 + BM <= p.m && n0 + BN <= p.n && p.k % BK == 0u) {
        // Every load is inside the operands: layouts without clamping.
        tensorLayoutNV<2> ux = createTensorLayoutNV(2);
        ux = setTensorLayoutDimensionNV(ux, p.m, p.k);
        tensorLayoutNV<2> uw = createTensorLayoutNV(2);
        uw = setTensorLayoutDimensionNV(uw, p.n, p.k);
        uint k0 = 0u;
        for (; k0 + UNROLL * BK <= p.k;) {
            [[unroll]] for (uint j = 0u; j < UNROLL; j++) {
                K_STEP(ux, uw, k0);
                k0 += BK;
            }
        }
        for (; k0 < p.k; k0 += BK) {
            K_STEP(ux, uw, k0);
        }
    } else {
        // Edge tiles: the layouts clamp to the operands with the constant 0.
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lx =
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        lx = setTensorLayoutDimensionNV(lx, p.m, p.k);
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lw =
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        lw = setTensorLayoutDimensionNV(lw, p.n, p.k);
        for (uint k0 = 0u; k0 < p.k; k0 += BK) {
            K_STEP(lx, lw, k0);
        }
    }

    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    ly = setTensorLayoutDimensionNV(ly, p.m, p.n);
    ly = setTensorLayoutStrideNV(ly, p.ldy, 1);
    coopMatPerElementNV(acc, acc, epilogue, n0);
    coopMatStoreTensorNV(acc, y, p.y_off, sliceTensorLayoutNV(ly, m0, BM, n0, BN));
}
