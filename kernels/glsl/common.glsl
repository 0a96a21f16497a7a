// Helpers shared by every kinema compute shader; the conventions are in README.md.
// Include after `#version 450` and `#extension GL_GOOGLE_include_directive : require`.

// ---- workgroup size and indexing ----------------------------------------------------------

// The workgroup size is specialization constant 0. Shaders declare
// `layout(local_size_x_id = 0) in;` and read the size from WORKGROUP_SIZE, not from
// gl_WorkGroupSize (Mesa 22.3's lavapipe leaves gl_WorkGroupSize at its unspecialised value).
layout(constant_id = 0) const uint WORKGROUP_SIZE = 64;

// Flat invocation index over a 2-D grid of 1-D workgroups (x fastest). The host spreads large
// dispatches over y because a dimension may hold as few as 65535 workgroups.
uint global_index() {
    return (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WORKGROUP_SIZE
        + gl_LocalInvocationID.x;
}

// ---- narrow types read from uint[] words (no 16-bit or 8-bit storage feature needed) -----
// Element i of a little-endian array of 16-bit values: element 2j is the low half of word j.
#define HALF_BITS(buf, i) (((buf)[(i) >> 1u] >> (((i) & 1u) << 4u)) & 0xffffu)
#define LOAD_F16(buf, i) unpackHalf2x16(HALF_BITS(buf, i)).x
// bf16 is the top half of an f32: widening is exact.
#define LOAD_BF16(buf, i) uintBitsToFloat(HALF_BITS(buf, i) << 16u)
// Byte b of the array.
#define LOAD_BYTE(buf, b) (((buf)[(b) >> 2u] >> (((b) & 3u) << 3u)) & 0xffu)

// q8_0 (GGML): blocks of 32 values, each an f16 scale d then 32 int8 quants q, value d * q.
// `base` is the byte offset of the tensor's first block, `e` the element index.
#define Q8_0_BLOCK_BYTES 34u
#define Q8_0_SCALE(buf, blk) \
    unpackHalf2x16(LOAD_BYTE(buf, blk) | (LOAD_BYTE(buf, (blk) + 1u) << 8u)).x
#define Q8_0_QUANT(buf, blk, j) float(int(LOAD_BYTE(buf, (blk) + 2u + (j)) << 24u) >> 24)
#define LOAD_Q8_0(buf, base, e) \
    (Q8_0_SCALE(buf, (base) + ((e) >> 5u) * Q8_0_BLOCK_BYTES) \
     * Q8_0_QUANT(buf, (base) + ((e) >> 5u) * Q8_0_BLOCK_BYTES, (e) & 31u))

// Store the low 16 bits of v as element i. Two invocations may own the two halves of one word,
// so each clears and sets only its own half with integer atomics.
#define STORE_U16(buf, i, v) \
    { \
        uint sh_ = ((i) & 1u) << 4u; \
        atomicAnd((buf)[(i) >> 1u], ~(0xffffu << sh_)); \
        atomicOr((buf)[(i) >> 1u], ((v) & 0xffffu) << sh_); \
    }

// ---- exact arithmetic helpers -------------------------------------------------------------

// p + e == a * b exactly (Dekker's product with Veltkamp splitting: no fma, because drivers
// may lower fma() to an unfused multiply-add; `precise` forbids contraction). Needs
// |a|, |b| < 2^115 so the splitting cannot overflow.
void two_prod(float a, float b, out float p, out float e) {
    precise float pp = a * b;
    precise float ca = 4097.0 * a;
    precise float ah = ca - (ca - a);
    precise float al = a - ah;
    precise float cb = 4097.0 * b;
    precise float bh = cb - (cb - b);
    precise float bl = b - bh;
    precise float ee = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
    p = pp;
    e = ee;
}

// a / b rounded to nearest even, as on the CPU. Vulkan lets OpFDiv be off by 2.5 ulp (NVIDIA
// divides through an approximate reciprocal), so the quotient q is corrected once with its
// exact residual a - q b: q + (a - q b) / b then rounds to the correctly rounded quotient
// (a quotient of floats is never exactly halfway between two floats). Infinite, NaN, zero
// and huge operands keep the plain quotient.
float div_rn(float a, float b) {
    precise float q = a / b;
    if (isnan(q) || isinf(q) || q == 0.0 || abs(q) > 1e30 || abs(b) > 1e30 || abs(b) < 1e-30) {
        return q;
    }
    float p;
    float e;
    two_prod(q, b, p, e);
    // a - p is exact (p is within a few ulp of a), and so is the residual.
    precise float r = (a - p) - e;
    precise float c = r / b;
    precise float qc = q + c;
    return qc;
}

// ---- transcendental functions accurate to a few ulp ---------------------------------------
// Vulkan only bounds exp() to 3 + 2|x| ulp (NVIDIA evaluates 2^(x log2 e), losing accuracy for
// large |x|), and GLSL has no erf, so these are written out. The polynomial coefficients are
// relative-error minimax fits made with tools/fit_math.py (mpmath reference); the errors
// quoted were measured over random f32 arguments against mpmath.

// exp(x): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2 (ln2_hi has 11 significant bits,
// so n * ln2_hi is exact), exp(r) = 1 + r + r^2 Q(r), then scale by 2^n. Max 0.9 ulp.
float exp_f32(float x) {
    if (x > 88.7228394) {
        return uintBitsToFloat(0x7f800000u);
    }
    if (x < -103.972084) {
        return 0.0;
    }
    float n = floor(x * 1.44269502 + 0.5);
    float r = (x - n * 0.693145752) - n * 1.42860682e-6;
    float q = 1.985778508e-04;
    q = q * r + 1.393360435e-03;
    q = q * r + 8.333360776e-03;
    q = q * r + 4.166646674e-02;
    q = q * r + 1.666666716e-01;
    q = q * r + 5.000000000e-01;
    float p = 1.0 + (r + r * r * q);
    // Two steps keep 2^n representable when n is -126 - 23 .. -127 or 128.
    int ni = int(n);
    int n1 = ni / 2;
    return ldexp(ldexp(p, n1), ni - n1);
}

// x with the low 12 mantissa bits cleared: its square is exact in f32.
float split_hi(float x) {
    return uintBitsToFloat(floatBitsToUint(x) & 0xfffff000u);
}

// Split precision's parts of v (linear_cm2.comp, attention_cm2.comp, cast_f16.comp): the high
// part, v with the 13 mantissa bits f16 lacks cleared (a bit mask, not a conversion: on the
// H200's driver an f32 -> f16 -> f32 round trip of a cooperative matrix's elements is not
// narrowed), exact in f16 for |v| in f16's normal range; and the low part, (v - hi) 2^11,
// exact in f32 and rounded to f16 by the caller's conversion.
float f16_hi_part(float v) {
    return uintBitsToFloat(floatBitsToUint(v) & 0xffffe000u);
}

float f16_lo_part(float v) {
    return (v - f16_hi_part(v)) * 2048.0;
}

// exp(-s * x^2) for s = 1 or 0.5, with x^2 split as hi^2 + (x - hi)(x + hi) so the large part
// of the exponent carries no rounding error.
float exp_neg_sq(float x, float s) {
    float hi = split_hi(x);
    return exp_f32(-s * (hi * hi)) * exp_f32(-s * ((x - hi) * (x + hi)));
}

// G(u) = x exp(x^2) erfc(x) for u = 1/x^2, x >= 1: on x in [1, 2) and on [2, inf).
float erfc_g(float x, float u) {
    float g;
    if (x < 2.0) {
        g = 2.326613478e-02;
        g = g * u - 1.386936605e-01;
        g = g * u + 3.687206507e-01;
        g = g * u - 5.824475884e-01;
        g = g * u + 6.209820509e-01;
        g = g * u - 4.944433868e-01;
        g = g * u + 3.404858112e-01;
        g = g * u - 2.741123736e-01;
        g = g * u + 5.638259053e-01;
    } else {
        g = 3.545496368e+01;
        g = g * u - 4.650260544e+01;
        g = g * u + 2.793422699e+01;
        g = g * u - 1.075873089e+01;
        g = g * u + 3.321492195e+00;
        g = g * u - 1.042709947e+00;
        g = g * u + 4.228250980e-01;
        g = g * u - 2.820921540e-01;
        g = g * u + 5.641895533e-01;
    }
    return g;
}

// erf(x) for |x| < 1 as x + x P(x^2). Max 1 ulp.
float erf_small(float x) {
    float s = x * x;
    float p = 7.964390534e-05;
    p = p * s - 8.037577500e-04;
    p = p * s + 5.190597847e-03;
    p = p * s - 2.685444988e-02;
    p = p * s + 1.128358319e-01;
    p = p * s - 3.761262298e-01;
    p = p * s + 1.283791661e-01;
    return x + x * p;
}

// erfc(x) for x >= 1 (underflows to 0 past 10.06). Max 4 ulp.
float erfc_large(float x) {
    return exp_neg_sq(x, 1.0) * erfc_g(x, 1.0 / (x * x)) / x;
}

float erf_f32(float x) {
    float a = abs(x);
    if (a < 1.0) {
        return erf_small(x);
    }
    if (isnan(x)) {
        return x;
    }
    if (a > 10.0) {
        return sign(x);
    }
    return sign(x) * (1.0 - erfc_large(a));
}

// Exact GELU 0.5 x (1 + erf(x / sqrt 2)). For |x| >= sqrt 2 the erfc branch takes x^2 / 2
// from x itself (not from the rounded x / sqrt 2), so the negative tail keeps its relative
// accuracy. Max 7 ulp on [-12.5, 12.5].
float gelu_erf(float x) {
    float a = abs(x);
    float phi;
    if (a < 1.41421356) {
        phi = 1.0 + erf_small(x * 0.707106781);
    } else if (a > 16.0) {
        // erfc(a / sqrt 2) is below 1e-56 here (and x^2 may overflow).
        phi = x < 0.0 ? 0.0 : 2.0;
    } else {
        // erfc(a / sqrt 2) = exp(-a^2 / 2) G(2 / a^2) sqrt 2 / a.
        float t = exp_neg_sq(a, 0.5) * erfc_g(a * 0.707106781, 2.0 / (a * a)) * (1.41421356 / a);
        phi = x < 0.0 ? t : 2.0 - t;
    }
    return 0.5 * x * phi;
}

// Tanh GELU 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3):
// no cancellation in 1 + tanh for negative x, and no tanh (Vulkan bounds it only as a
// quotient of exps).
float gelu_tanh(float x) {
    float u = 0.797884561 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp_f32(-2.0 * u));
}

float silu(float x) {
    return x / (1.0 + exp_f32(-x));
}

// Activation codes shared with the host (src/vulkan/ops.rs, `act_code`).
#define ACT_NONE 0u
#define ACT_RELU 1u
#define ACT_LEAKY_RELU 2u
#define ACT_GELU 3u
#define ACT_GELU_TANH 4u
#define ACT_SILU 5u

float activate(uint act, float slope, float x) {
    switch (act) {
    case ACT_RELU:
        // PyTorch's relu (and the CPU kernels) keep NaN and map -0 to +0.
        return (x > 0.0 || isnan(x)) ? x : 0.0;
    case ACT_LEAKY_RELU:
        return x >= 0.0 ? x : slope * x;
    case ACT_GELU:
        return gelu_erf(x);
    case ACT_GELU_TANH:
        return gelu_tanh(x);
    case ACT_SILU:
        return silu(x);
    default:
        return x;
    }
}
