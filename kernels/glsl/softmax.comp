#version 450
// y = softmax(scale * x) over each row of x [rows, cols]. One workgroup per row. Each
// invocation keeps a running maximum m and sum s of exp(v - m) over a strided part of the row
// (ascending), rescaling s when m grows; fixed trees (rows.glsl) then combine the maxima and
// the rescaled sums, and a second pass writes exp(v - max) / sum. Two reads of x, one write.
//
// Strict reductions: fixed trees over invocation ids (rows.glsl). Its fast-mode variant
// softmax_sg (tools/shaderc's variant table) defines SUBGROUP_REDUCE: the row reductions use
// subgroup arithmetic.
#extension GL_GOOGLE_include_directive : require
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common.glsl"
#include "rows.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint y_off;
    uint rows;
    uint cols;
    float scale;
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
    const float NEG_INF = uintBitsToFloat(0xff800000u);

    // -inf entries (masked logits) add nothing and never become m while s is 0, so no
    // inf - inf arises; a NaN makes s NaN, and so the whole row, as on the CPU.
    float m = NEG_INF;
    float s = 0.0;
    for (uint c = t; c < p.cols; c += WORKGROUP_SIZE) {
        float v = x[xr + c] * p.scale;
        if (v > m) {
            s = (s == 0.0 ? 0.0 : s * exp_f32(m - v)) + 1.0;
            m = v;
        } else if (v != NEG_INF) {
            s += exp_f32(v - m);
        }
    }
    float mx = wg_max(m);
    float sum = wg_sum(s == 0.0 ? 0.0 : s * exp_f32(m - mx));
    float inv = div_rn(1.0, sum);

    for (uint c = t; c < p.cols; c += WORKGROUP_SIZE) {
        y[yr + c] = exp_f32(x[xr + c] * p.scale - mx) * inv;
    }
}
