#version 450
// The cooperative-matrix multiply-add peak of a device (`kinema bench --op coopmat_peak`):
// each subgroup repeats 8 independent 16 x 16 x 16 f16 x f16 + f32 products on operands held
// in registers, with no memory traffic in the loop, then stores the sum of its accumulators
// so that nothing is optimised away. It bounds what the fast-mode GEMM and attention kernels
// could reach if their loads cost nothing (the GPU counterpart of the CPU's fma_peak).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_cooperative_matrix : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint y_off;
    uint iters;
} p;

shared float16_t src[256];

#define A_MAT coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define B_MAT coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define C_MAT coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

void main() {
    for (uint i = gl_LocalInvocationID.x; i < 256u; i += WORKGROUP_SIZE) {
        src[i] = float16_t(float(i % 7u) * (1.0 / 1024.0));
    }
    barrier();
    A_MAT a0;
    A_MAT a1;
    B_MAT b0;
    B_MAT b1;
    coopMatLoad(a0, src, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(a1, src, 0, 16, gl_CooperativeMatrixLayoutColumnMajor);
    coopMatLoad(b0, src, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(b1, src, 0, 16, gl_CooperativeMatrixLayoutColumnMajor);
    C_MAT c0 = C_MAT(0.0);
    C_MAT c1 = C_MAT(0.0);
    C_MAT c2 = C_MAT(0.0);
    C_MAT c3 = C_MAT(0.0);
    C_MAT c4 = C_MAT(0.0);
    C_MAT c5 = C_MAT(0.0);
    C_MAT c6 = C_MAT(0.0);
    C_MAT c7 = C_MAT(0.0);
    for (uint it = 0u; it < p.iters; it++) {
        c0 = coopMatMulAdd(a0, b0, c0);
        c1 = coopMatMulAdd(a1, b0, c1);
        c2 = coopMatMulAdd(a0, b1, c2);
        c3 = coopMatMulAdd(a1, b1, c3);
        c4 = coopMatMulAdd(a0, b0, c4);
        c5 = coopMatMulAdd(a1, b0, c5);
        c6 = coopMatMulAdd(a0, b1, c6);
        c7 = coopMatMulAdd(a1, b1, c7);
    }
    C_MAT s = ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7));
    uint block = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
    coopMatStore(s, y, p.y_off + block * 256u, 16, gl_CooperativeMatrixLayoutRowMajor);
}
