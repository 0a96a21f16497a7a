#version 450
// out = a * x + b * y, two products and one sum (no fused multiply-add), as on the CPU.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Y { float y[]; };
layout(set = 0, binding = 2) writeonly buffer O { float o[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint y_off;
    uint o_off;
    uint n;
    float a;
    float b;
} p;

void main() {
    uint i = global_index();
    if (i >= p.n) {
        return;
    }
    precise float v = p.a * x[p.x_off + i] + p.b * y[p.y_off + i];
    o[p.o_off + i] = v;
}
