#version 450
// y = (act(pre_mask ? x * m : x) + r * m) * m elementwise; the residual term only when
// has_r. Each step rounds as the unfused binary / activation shaders do: `precise` keeps the
// residual product and sum two roundings (no contraction into a fused multiply-add).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer M { float m[]; };
layout(set = 0, binding = 2) readonly buffer R { float r[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint m_off;
    uint r_off;
    uint y_off;
    uint n;
    uint act;
    float slope;
    uint pre_mask;
    uint has_r;
} p;

void main() {
    uint i = global_index();
    if (i >= p.n) {
        return;
    }
    float mv = m[p.m_off + i];
    precise float u = x[p.x_off + i];
    if (p.pre_mask != 0u) {
        u = u * mv;
    }
    u = activate(p.act, p.slope, u);
    if (p.has_r != 0u) {
        precise float rm = r[p.r_off + i] * mv;
        u = u + rm;
    }
    y[p.y_off + i] = u * mv;
}
