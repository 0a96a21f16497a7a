#version 450
// y = silu(gate) * up (the SwiGLU gate of a Llama-style MLP) over rows of cols values: y is
// dense, gate and up read their rows stride elements apart (2 cols for the halves of a fused
// gate/up projection, cols for plain elementwise SwiGLU).
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
    // rows * cols
    uint n;
    uint cols;
    uint stride;
} p;

void main() {
    uint i = global_index();
    if (i >= p.n) {
        return;
    }
    uint e = (i / p.cols) * p.stride + i % p.cols;
    y[p.y_off + i] = silu(gate[p.g_off + e]) * up[p.u_off + e];
}
