#version 450
// Classifier-free guidance over rows [cond, uncond] or [text, constraint, uncond], left to
// right in f32 with no contraction (kimodo/model/cfg.py#L94-129).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer R { float r[]; };
layout(set = 0, binding = 1) writeonly buffer O { float o[]; };

layout(push_constant) uniform Push {
    uint r_off;
    uint o_off;
    uint n;
    uint rows;
    float w_text;
    float w_constraint;
} p;

void main() {
    uint i = global_index();
    if (i >= p.n) {
        return;
    }
    uint base = p.r_off + i;
    float u = r[base + (p.rows - 1u) * p.n];
    float t = r[base];
    if (p.rows == 2u) {
        precise float v = u + p.w_text * (t - u);
        o[p.o_off + i] = v;
    } else {
        float c = r[base + p.n];
        precise float v = u + p.w_text * (t - u) + p.w_constraint * (c - u);
        o[p.o_off + i] = v;
    }
}
