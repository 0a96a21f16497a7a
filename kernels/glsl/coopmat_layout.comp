#version 450
// Where a device keeps the elements of a 16 x 16 f16 B fragment (gl_MatrixUseB, one subgroup):
// the fragment is loaded column-major from a table whose entry at (row r, column c) is
// 16 c + r, and each invocation writes what its elements hold. y[0] is the length of the
// fragment per invocation; element e of invocation i is y[1 + i * length + e]. The host
// compares the table with the layout the lane-loading streaming kernels assume
// (linear_cm.comp with LANE) and runs them only where it agrees.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_cooperative_matrix : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint y_off;
} p;

shared float16_t table[256];

void main() {
    uint lane = gl_SubgroupInvocationID;
    for (uint i = gl_LocalInvocationID.x; i < 256u; i += gl_WorkGroupSize.x) {
        table[i] = float16_t(float(i));
    }
    barrier();
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b;
    coopMatLoad(b, table, 0u, 16u, gl_CooperativeMatrixLayoutColumnMajor);
    if (gl_SubgroupID != 0u) {
        return;
    }
    uint len = uint(b.length());
    if (lane == 0u) {
        y[p.y_off] = float(len);
    }
    for (uint e = 0u; e < len; e++) {
        y[p.y_off + 1u + lane * len + e] = float(b[e]);
    }
}
