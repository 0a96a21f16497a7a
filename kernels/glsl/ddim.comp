#version 450
// One DDIM (eta 0) step with the coefficients read from a buffer, so a recorded command
// buffer can be re-submitted every step; f32 operation order of Kimodo's DDIMSampler
// (kimodo/model/diffusion.py#L113-133), no contraction, correctly rounded division:
// eps = (c0 x_t - x0) / c1, out = x0 c2 + c3 eps.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer XT { float xt[]; };
layout(set = 0, binding = 1) readonly buffer X0 { float x0[]; };
layout(set = 0, binding = 2) readonly buffer C { float c[]; };
layout(set = 0, binding = 3) writeonly buffer O { float o[]; };

layout(push_constant) uniform Push {
    uint xt_off;
    uint x0_off;
    uint c_off;
    uint o_off;
    uint n;
} p;

void main() {
    uint i = global_index();
    if (i >= p.n) {
        return;
    }
    float sr = c[p.c_off];
    float srm1 = c[p.c_off + 1u];
    float sp = c[p.c_off + 2u];
    float s1mp = c[p.c_off + 3u];
    float x0v = x0[p.x0_off + i];
    precise float num = sr * xt[p.xt_off + i] - x0v;
    float eps = div_rn(num, srm1);
    precise float v = x0v * sp + s1mp * eps;
    o[p.o_off + i] = v;
}
