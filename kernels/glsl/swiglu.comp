#version 450
// y = silu(gate) * up elementwise (the SwiGLU gate of a Llama-style MLP).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Gate { float gate[]; };
layout(set = 0, binding = 1) readonly buffer Up { float up[]; };
layout(set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint g_off;
    uint u_off;
    uint y_off;
    uint n;
} p;

void main() {
    uint i = global_index();
    if (i >= p.n) {
        return;
    }
    y[p.y_off + i] = silu(gate[p.g_off + i]) * up[p.u_off + i];
}
