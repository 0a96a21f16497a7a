#version 450
// Rotary position embedding on the first heads of each token's row of x [tokens, row_stride]:
// each invocation rotates one pair (x[a], x[b]) of one head of one token by the angle
// pos[token] * inv_freq[i], or copies one element of the row past the rotated heads (the
// values of a fused Q/K/V projection); the f32 product
// as on the CPU (Hugging Face Llama computes `inv_freq * pos` in f32), whose sine and cosine
// are then computed accurately (GLSL's sin and cos are only bounded to 2^-11 absolute on
// [-pi, pi] by Vulkan). Pairs are (i, i + head_dim / 2) or (2i, 2i + 1).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Pos { int pos[]; };
layout(set = 0, binding = 2) readonly buffer InvFreq { float inv_freq[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint pos_off;
    uint f_off;
    uint y_off;
    // tokens * per_token
    uint count;
    // heads * half_dim pairs, then row_stride - heads * head_dim copied elements
    uint per_token;
    uint half_dim;
    // 0: rotate-half pairs (i, i + half_dim); 1: interleaved pairs (2i, 2i + 1)
    uint interleaved;
    uint row_stride;
    // heads * half_dim
    uint row_pairs;
} p;

// sin(a) and cos(a) for |a| < 2^24 with an absolute error of a few 1e-8. Cody-Waite
// reduction a = n pi/2 + r with pi/2 = P1 + P2 + P3 (P1 = f32(pi/2), the others the f32
// roundings of what is left): n * P1 is formed exactly (two_prod) and a - n P1 is exact
// (Sterbenz), so r keeps its absolute accuracy for large n. Then Cephes' sinf/cosf minimax
// polynomials on |r| <= pi/4 (cephes/single/sinf.c), and the quadrant n mod 4.
void sin_cos(float a, out float s, out float c) {
    float n = floor(a * 0.636619747 + 0.5);
    float hi;
    float lo;
    two_prod(n, 1.57079637, hi, lo);
    precise float r = ((a - hi) - lo) - n * -4.37113883e-8 - n * -1.71512451e-15;
    float z = r * r;
    float sr = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    float cr = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2)
        * z * z - 0.5 * z + 1.0;
    switch (int(n) & 3) {
    case 0:
        s = sr;
        c = cr;
        break;
    case 1:
        s = cr;
        c = -sr;
        break;
    case 2:
        s = -sr;
        c = -cr;
        break;
    default:
        s = -cr;
        c = sr;
        break;
    }
}

void main() {
    uint i = global_index();
    if (i >= p.count) {
        return;
    }
    uint token = i / p.per_token;
    uint j = i % p.per_token;
    uint row = token * p.row_stride;
    if (j >= p.row_pairs) {
        uint e = row + 2u * p.row_pairs + (j - p.row_pairs);
        y[p.y_off + e] = x[p.x_off + e];
        return;
    }
    uint head = j / p.half_dim;
    uint k = j % p.half_dim;
    precise float ang = float(pos[p.pos_off + token]) * inv_freq[p.f_off + k];
    float s;
    float c;
    sin_cos(ang, s, c);
    uint o = row + head * 2u * p.half_dim;
    uint a = p.interleaved != 0u ? o + 2u * k : o + k;
    uint b = p.interleaved != 0u ? a + 1u : a + p.half_dim;
    float xa = x[p.x_off + a];
    float xb = x[p.x_off + b];
    y[p.y_off + a] = xa * c - xb * s;
    y[p.y_off + b] = xb * c + xa * s;
}
