#version 450
// Sinusoidal positional encoding rows start .. start + len of width dim (Kimodo's
// PositionalEncoding, kimodo/model/backbone.py#L253-266):
//   pe[p, 2i] = sin(p div[i]),  pe[p, 2i + 1] = cos(p div[i]).
// The host computes div[i] = 10000^(-2i / dim) with the CPU reference's own f32 expression and
// binds it as a table, so every angle p div[i] (one correctly rounded f32 product) is the CPU's
// bit for bit. sin and cos are written out here, as Vulkan bounds the built-ins only to 2^-11
// absolute on [-pi, pi]: a Cody-Waite reduction by pi/2 in three parts, the first product
// exact (two_prod), then Cephes' sinf/cosf polynomials on [-pi/4, pi/4]. Within 7.5e-8
// absolute of the true values (measured) for angles below 2^24; the host refuses positions
// from 2^24 on.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Div { float div[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push {
    uint div_off;
    uint o_off;
    uint start;
    uint len;
    uint dim;
} p;

#include "trig.glsl"

void main() {
    uint i = global_index();
    if (i >= p.len * p.dim) {
        return;
    }
    uint row = i / p.dim;
    uint col = i % p.dim;
    float pos = float(p.start + row);
    float a = pos * div[p.div_off + col / 2u];
    o[p.o_off + i] = sin_quarter(a, col & 1u);
}
