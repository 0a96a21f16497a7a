#version 450
// y = (x - mean) / sqrt(var + eps) * gamma + beta over each row of x [rows, cols], with the
// biased variance. One workgroup per row; each invocation sums a strided part of the row in
// ascending order, then a fixed tree combines the parts (rows.glsl), so a row's result is the
// same on every run. Two passes over x for the statistics (mean, then squared deviations) as
// the reference, one to write.
//
// Strict reductions: fixed trees over invocation ids (rows.glsl). Its fast-mode variant
// layer_norm_sg (tools/shaderc's variant table) defines SUBGROUP_REDUCE: the row reductions use
// subgroup arithmetic.
//
// RESIDUAL (add_layer_norm, add_layer_norm_sg) normalises x + r instead, with the residual r
// at binding 1: every read of x[c] becomes the f32 sum x[c] + r[c], so the result is the same,
// bit for bit, as the binary shader's add followed by layer_norm.
#extension GL_GOOGLE_include_directive : require
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common.glsl"
#include "rows.glsl"

layout(local_size_x_id = 0) in;

#ifdef RESIDUAL
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer R { float r[]; };
layout(set = 0, binding = 2) readonly buffer Gamma { float gamma[]; };
layout(set = 0, binding = 3) readonly buffer Beta { float beta[]; };
layout(set = 0, binding = 4) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint r_off;
    uint g_off;
    uint b_off;
    uint y_off;
    uint rows;
    uint cols;
    float eps;
    uint has_gamma;
    uint has_beta;
} p;

// Element c of the row being normalised.
#define XV(c) (x[xr + (c)] + r[rr + (c)])
#else
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Gamma { float gamma[]; };
layout(set = 0, binding = 2) readonly buffer Beta { float beta[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint g_off;
    uint b_off;
    uint y_off;
    uint rows;
    uint cols;
    float eps;
    uint has_gamma;
    uint has_beta;
} p;

#define XV(c) x[xr + (c)]
#endif

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    // The same for the whole workgroup, so no invocation skips a barrier.
    if (row >= p.rows) {
        return;
    }
    uint t = gl_LocalInvocationID.x;
    uint xr = p.x_off + row * p.cols;
#ifdef RESIDUAL
    uint rr = p.r_off + row * p.cols;
#endif
    uint yr = p.y_off + row * p.cols;
    float n = float(p.cols);

    float s = 0.0;
    for (uint c = t; c < p.cols; c += WORKGROUP_SIZE) {
        s += XV(c);
    }
    float mean = div_rn(wg_sum(s), n);

    float q = 0.0;
    for (uint c = t; c < p.cols; c += WORKGROUP_SIZE) {
        float d = XV(c) - mean;
        q += d * d;
    }
    float var = div_rn(wg_sum(q), n);
    float inv = div_rn(1.0, sqrt_rn(var + p.eps));

    for (uint c = t; c < p.cols; c += WORKGROUP_SIZE) {
        float v = (XV(c) - mean) * inv;
        if (p.has_gamma != 0u) {
            v *= gamma[p.g_off + c];
        }
        if (p.has_beta != 0u) {
            v += beta[p.b_off + c];
        }
        y[yr + c] = v;
    }
}
