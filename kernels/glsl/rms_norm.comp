#version 450
// y = x / sqrt(mean(x^2) + eps) * gamma over each row of x [rows, cols]. One workgroup per
// row; each invocation sums a strided part of the row in ascending order, then a fixed tree
// combines the parts (rows.glsl), so a row's result is the same on every run.
//
// Strict reductions: fixed trees over invocation ids (rows.glsl). Its fast-mode variant
// rms_norm_sg (tools/shaderc's variant table) defines SUBGROUP_REDUCE: the row reductions use
// subgroup arithmetic.
#extension GL_GOOGLE_include_directive : require
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common.glsl"
#include "rows.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Gamma { float gamma[]; };
layout(set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint g_off;
    uint y_off;
    uint rows;
    uint cols;
    float eps;
    uint has_gamma;
} p;

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    // The same for the whole workgroup, so no invocation skips a barrier.
    if (row >= p.rows) {
        return;
    }
    uint t = gl_LocalInvocationID.x;
    uint xr = p.x_off + row * p.cols;
    uint yr = p.y_off + row * p.cols;

    float s = 0.0;
    for (uint c = t; c < p.cols; c += WORKGROUP_SIZE) {
        float v = x[xr + c];
        s += v * v;
    }
    float ms = div_rn(wg_sum(s), float(p.cols));
    float inv = div_rn(1.0, sqrt_rn(ms + p.eps));

    for (uint c = t; c < p.cols; c += WORKGROUP_SIZE) {
        float v = x[xr + c] * inv;
        if (p.has_gamma != 0u) {
            v *= gamma[p.g_off + c];
        }
        y[yr + c] = v;
    }
}
