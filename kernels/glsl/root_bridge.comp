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

// sin(x) and cos(x) for |x| <= pi/4 (a little beyond after rounding n): Cephes sinf.c/cosf.c.
float sin_poly(float x) {
    float z = x * x;
    float y = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z;
    return y * x + x;
}

float cos_poly(float x) {
    float z = x * x;
    float y = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z;
    return (y * z - 0.5 * z) + 1.0;
}

// pi/2 = P1 + P2 + P3 to about 2^-75 (each the f32 nearest the remainder).
#define P1 uintBitsToFloat(0x3fc90fdbu)
#define P2 uintBitsToFloat(0xb33bbd2eu)
#define P3 uintBitsToFloat(0xa6f72cedu)
#define TWO_OVER_PI uintBitsToFloat(0x3f22f983u)

// sin(a) (quarter 0) or cos(a) = sin(a + pi/2) (quarter 1) for |a| <= 4: a Cody-Waite
// reduction by the nearest multiple n of pi/2 (|n| <= 3, so n P1 = h + e exactly and a - h is
// exact by Sterbenz's lemma), then the polynomials on [-pi/4, pi/4].
float sin_quarter(float a, uint quarter) {
    float n = floor(a * TWO_OVER_PI + 0.5);
    float h;
    float e;
    two_prod(n, P1, h, e);
    precise float t = a - h;
    precise float small = (e + n * P2) + n * P3;
    precise float r = t - small;
    uint q = uint(int(n) + 4) + quarter;
    float v = (q & 1u) != 0u ? cos_poly(r) : sin_poly(r);
    return (q & 2u) != 0u ? -v : v;
}

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
