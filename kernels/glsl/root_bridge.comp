#version 450
// Kimodo's bridge between the denoiser stages, global_root_to_local_root with normalized=True
// (kimodo/motion_rep/reps/base.py#L107-151; src/cpu/root_bridge.rs is the reference):
// x [rows, frames, 5] (normalised smooth root xyz, heading cos, sin) -> out [rows, frames, 4]
// (normalised rot_vel, vel_x, vel_z, root_y). One invocation per output frame; it reads the
// frame pair (a, a + 1), a = min(t, frames - 2), so the last frame repeats the one before.
// Every product, sum and quotient is `precise` and in the reference's order (the quotients
// correctly rounded by div_rn); atan2, sin and cos are written out because Vulkan bounds the
// built-ins only loosely (atan to 4096 ulp, sin and cos to 2^-11 absolute).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer O { float o[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint o_off;
    uint rows;
    uint frames;
    float fps;
    // f32 bits: global mean [0, 5), global sqrt(std^2 + 1e-5) [5, 10), local mean [10, 14),
    // local sqrt(std^2 + 1e-5) [14, 18), the scales computed on the host as the CPU does.
    uint stats[18];
} p;

float stat(uint i) {
    return uintBitsToFloat(p.stats[i]);
}

#define PI_F uintBitsToFloat(0x40490fdbu)
#define PI_2_F uintBitsToFloat(0x3fc90fdbu)
#define PI_4_F uintBitsToFloat(0x3f490fdbu)

// atan(r) for 0 <= r <= 1: Cephes atanf.c (one reduction at tan(pi/8)), about 2 ulp.
float atan_unit(float r) {
    float base = 0.0;
    if (r > 0.4142135623730950) {
        base = PI_4_F;
        precise float num = r - 1.0;
        precise float den = r + 1.0;
        r = div_rn(num, den);
    }
    precise float z = r * r;
    precise float poly =
        (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z
         - 3.33329491539e-1) * z * r + r;
    precise float v = base + poly;
    return v;
}

// atan2(y, x) with C's conventions for signed zeros; NaN in, NaN out.
float atan2_f32(float y, float x) {
    if (isnan(x) || isnan(y)) {
        return x + y;
    }
    float ax = abs(x);
    float ay = abs(y);
    float hi = max(ax, ay);
    float lo = min(ax, ay);
    float a = hi == 0.0 ? 0.0 : (isinf(hi) ? (isinf(lo) ? PI_4_F : 0.0) : atan_unit(div_rn(lo, hi)));
    if (ay > ax) {
        precise float t = PI_2_F - a;
        a = t;
    }
    if ((floatBitsToUint(x) >> 31u) != 0u) {
        precise float t = PI_F - a;
        a = t;
    }
    return (floatBitsToUint(y) >> 31u) != 0u ? -a : a;
}

#include "trig.glsl"

void main() {
    uint i = global_index();
    if (i >= p.rows * p.frames) {
        return;
    }
    uint row = i / p.frames;
    uint t = i % p.frames;
    uint a = min(t, p.frames - 2u);
    float g[2][5];
    float c[2];
    float s[2];
    for (uint f = 0u; f < 2u; f++) {
        uint base = p.x_off + (row * p.frames + a + f) * 5u;
        for (uint k = 0u; k < 5u; k++) {
            precise float v = x[base + k] * stat(5u + k) + stat(k);
            g[f][k] = v;
        }
        float theta = atan2_f32(g[f][4], g[f][3]);
        c[f] = sin_quarter(theta, 1u);
        s[f] = sin_quarter(theta, 0u);
    }
    precise float cos_diff = c[1] * c[0] + s[1] * s[0];
    precise float sin_diff = s[1] * c[0] - c[1] * s[0];
    precise float rot_vel = p.fps * atan2_f32(sin_diff, cos_diff);
    precise float vel_x = p.fps * (g[1][0] - g[0][0]);
    precise float vel_z = p.fps * (g[1][2] - g[0][2]);
    // Root y of frame t itself (frame a + 1 when t is the last frame).
    float y = g[t == a ? 0 : 1][1];
    float local[4] = float[4](rot_vel, vel_x, vel_z, y);
    uint ob = p.o_off + i * 4u;
    for (uint k = 0u; k < 4u; k++) {
        precise float num = local[k] - stat(10u + k);
        o[ob + k] = div_rn(num, stat(14u + k));
    }
}
