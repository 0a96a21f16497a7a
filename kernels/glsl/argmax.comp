#version 450
// Index of the first maximum of each row, [rows, cols] f32 -> u32 [rows]; a NaN counts as
// larger than every number and the first NaN wins. One workgroup per row (argmax.glsl).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

#include "argmax.glsl"

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer O { uint o[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint o_off;
    uint rows;
    uint cols;
} p;

void main() {
    uint row = am_row();
    // Uniform per workgroup, so every invocation of a live row reaches the barriers.
    if (row >= p.rows) {
        return;
    }
    uint tid = gl_LocalInvocationID.x;
    uint base = p.x_off + row * p.cols;
    // Column 0 exists (cols >= 1); invocations past the row start from it.
    float bv = x[base];
    uint bi = 0u;
    for (uint c = tid; c < p.cols; c += WORKGROUP_SIZE) {
        am_fold(bv, bi, x[base + c], c);
    }
    uint best = am_reduce(bv, bi);
    if (tid == 0u) {
        o[p.o_off + row] = best;
    }
}
