#version 450
// Nearest-neighbour x2 upsampling along the last axis, [rows, len] -> [rows, 2 len]:
// output element o = r * 2 len + 2 i + j copies input r * len + i = o / 2.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint y_off;
    // output elements
    uint n;
} p;

void main() {
    uint o = global_index();
    if (o >= p.n) {
        return;
    }
    y[p.y_off + o] = x[p.x_off + (o >> 1u)];
}
