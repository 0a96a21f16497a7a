#version 450
// Linear y = act(x W^T + bias) on workgroup-scope cooperative matrices
// (VK_NV_cooperative_matrix2), for fast mode and (SPLIT 1) split precision: the whole BM x BN
// output tile of a workgroup is one accumulator, and the operands are read straight from the
// storage buffers through tensor layouts (no shared-memory staging written by us: the driver
// stages and schedules, which is what it can do better than subgroup-scope code on NVIDIA's
// tensor cores).
// Fast mode: the contract and rounding of linear_cm.comp: x and f32 weights are rounded to the
// nearest f16, f16 weights are exact, products are summed in f32; only the order of the sums
// differs. Split precision: see SPLIT below.
// The host runs it for f32 and f16 weights (bf16 and q8_0 take linear_cm.comp) when the
// device has the extension with workgroup scope, flexible dimensions, conversions,
// per-element operations and tensor addressing, and only for outputs large enough to fill the
// device (src/vulkan/kernels/gemm_policy/ picks the tiles).
//
// Edges: the loads clamp to the m x k and n x k extents with the constant 0 and the store to
// m x n, dropping what lies outside; no bounds checks are written here.
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
// 0: x is f32 (loaded as an f32 matrix and rounded here); 1: x is already f16 (cast_f16.comp
// wrote it, the same rounding, two a word; x_off counts words): the loads take it as it is.
layout(constant_id = 7) const uint X_DTYPE = 0;
// 1: split precision: each f32 operand v is split into hi, v with
// its mantissa cut to f16's 10 bits (exact in f16 for |v| in f16's normal range), and lo,
// (v - hi) 2^11 rounded to f16; y = xh wh + (xh wl + xl wh) 2^-11 from two f32 accumulators
// (the xl wl term, below 2^-20 |x w|, is dropped; f16 weights have no lo part). The products
// of f16 values are exact in f32, so each term of the sum is within about 2^-19 of x w.
layout(constant_id = 8) const uint SPLIT = 0;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 0) readonly buffer X16 { float16_t x16[]; };
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

// coopMatPerElementNV callbacks: split precision's high and low parts (common.glsl).
float cm_split_hi(const in uint r, const in uint c, const in float v) {
    return f16_hi_part(v);
}

float cm_split_lo(const in uint r, const in uint c, const in float v) {
    return f16_lo_part(v);
}

// One k step of BK: the x and W tiles through the layouts LX and LW, rounded to f16 (f32
// elements load as an f32 matrix and convert: loading them straight into an f16 matrix does
// not convert on the H200's driver), then the product into acc.
void main() {
    uint m0 = gl_WorkGroupID.y * BM;
    uint n0 = gl_WorkGroupID.x * BN;
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);

    // The layouts clamp to the operands with the constant 0, so reads past the end of k add
    // nothing. (Measured on the H200 and dropped: unclamped layouts for interior tiles with the
    // k loop unrolled 8 times, as ggml-vulkan's mul_mm_cm2 does; every tile got slower.)
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lx =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lx = setTensorLayoutDimensionNV(lx, p.m, p.k);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lw =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lw = setTensorLayoutDimensionNV(lw, p.n, p.k);
    if (SPLIT == 1u) {
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> lo =
            coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
        // X_DTYPE 1: cast_f16.comp (SPLIT) wrote x's high parts as f16 from x_off and its low
        // parts after them, m k rounded up to even elements further on.
        uint lo_off = 2u * p.x_off + 2u * ((p.m * p.k + 1u) / 2u);
        for (uint k0 = 0u; k0 < p.k; k0 += BK) {
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ah, al;
            if (X_DTYPE == 1u) {
                coopMatLoadTensorNV(ah, x16, 2u * p.x_off,
                                    sliceTensorLayoutNV(lx, m0, BM, k0, BK));
                coopMatLoadTensorNV(al, x16, lo_off, sliceTensorLayoutNV(lx, m0, BM, k0, BK));
            } else {
                coopmat<float, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseAccumulator> xf, xh, xl;
                coopMatLoadTensorNV(xf, x, p.x_off, sliceTensorLayoutNV(lx, m0, BM, k0, BK));
                coopMatPerElementNV(xh, xf, cm_split_hi);
                coopMatPerElementNV(xl, xf, cm_split_lo);
                ah = coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>(xh);
                al = coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>(xl);
            }
            coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> bh;
            if (W_DTYPE == 1u) {
                coopMatLoadTensorNV(bh, w16, p.w_off, sliceTensorLayoutNV(lw, n0, BN, k0, BK),
                                    transpose);
            } else {
                coopmat<float, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseAccumulator> wf, wh, wl;
                coopMatLoadTensorNV(wf, w, p.w_off, sliceTensorLayoutNV(lw, n0, BN, k0, BK),
                                    transpose);
                coopMatPerElementNV(wh, wf, cm_split_hi);
                coopMatPerElementNV(wl, wf, cm_split_lo);
                bh = coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>(wh);
                coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> bl =
                    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>(wl);
                lo = coopMatMulAdd(ah, bl, lo);
            }
            lo = coopMatMulAdd(al, bh, lo);
            acc = coopMatMulAdd(ah, bh, acc);
        }
        acc = acc + lo * float(1.0 / 2048.0);
    } else {
        for (uint k0 = 0u; k0 < p.k; k0 += BK) {
            // f32 elements load as an f32 matrix and convert (round to nearest) to f16: loading
            // them straight into an f16 matrix does not convert on the H200's driver (NaN).
            coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;
            if (X_DTYPE == 1u) {
                coopMatLoadTensorNV(a, x16, 2u * p.x_off,
                                    sliceTensorLayoutNV(lx, m0, BM, k0, BK));
            } else {
                coopmat<float, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseAccumulator> xf;
                coopMatLoadTensorNV(xf, x, p.x_off, sliceTensorLayoutNV(lx, m0, BM, k0, BK));
                a = coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>(xf);
            }
            coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b;
            if (W_DTYPE == 1u) {
                coopMatLoadTensorNV(b, w16, p.w_off, sliceTensorLayoutNV(lw, n0, BN, k0, BK),
                                    transpose);
            } else {
                coopmat<float, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseAccumulator> wf;
                coopMatLoadTensorNV(wf, w, p.w_off, sliceTensorLayoutNV(lw, n0, BN, k0, BK),
                                    transpose);
                b = coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>(wf);
            }
            acc = coopMatMulAdd(a, b, acc);
        }
    }

    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    ly = setTensorLayoutDimensionNV(ly, p.m, p.n);
    ly = setTensorLayoutStrideNV(ly, p.ldy, 1);
    coopMatPerElementNV(acc, acc, epilogue, n0);
    coopMatStoreTensorNV(acc, y, p.y_off, sliceTensorLayoutNV(ly, m0, BM, n0, BN));
}
