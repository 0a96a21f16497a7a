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

// a - n pi/2 for a whole n with |n| < 2^24 and a within a few multiples of pi/2 of n pi/2.
// a - n P1 is exact (n P1 = h + e exactly, and a - h by Sterbenz's lemma), so the result is
// rounded only in the small terms and once at the end.
float reduce(float a, float n) {
    float h;
    float e;
    two_prod(n, P1, h, e);
    precise float t = a - h;
    precise float small = (e + n * P2) + n * P3;
    precise float r = t - small;
    return r;
}

// sin(a) (quarter = 0) or cos(a) = sin(a + pi/2) (quarter = 1) for 0 <= a < 2^24.
float sin_quarter(float a, uint quarter) {
    // The nearest multiple of pi/2, within 2 of it: a 2/pi is rounded twice and 2/pi itself
    // once, which matters once a exceeds a million; the second step corrects n.
    float n = floor(a * TWO_OVER_PI + 0.5);
    float r = reduce(a, n);
    float m = floor(r * TWO_OVER_PI + 0.5);
    if (m != 0.0) {
        n += m;
        r = reduce(a, n);
    }
    uint q = uint(n) + quarter;
    float v = (q & 1u) != 0u ? cos_poly(r) : sin_poly(r);
    return (q & 2u) != 0u ? -v : v;
}

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
