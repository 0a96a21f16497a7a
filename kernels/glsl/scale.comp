#version 450
// y = s * x.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint y_off;
    uint n;
    float s;
} p;

void main() {
    uint i = global_index();
    if (i >= p.n) {
        return;
    }
    y[p.y_off + i] = p.s * x[p.x_off + i];
}
