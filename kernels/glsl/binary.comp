#version 450
// y[i] = a[i] (+ or *) b[i % b_len].
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint a_off;
    uint b_off;
    uint y_off;
    uint n;
    uint b_len;
    // 0 add, 1 mul
    uint op;
} p;

void main() {
    uint i = global_index();
    if (i >= p.n) {
        return;
    }
    float av = a[p.a_off + i];
    float bv = b[p.b_off + i % p.b_len];
    y[p.y_off + i] = p.op == 0u ? av + bv : av * bv;
}
