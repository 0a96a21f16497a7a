#version 450
// Gumbel-max sampling, MotionBricks' gumbel_sample
// (motionbricks/motion_backbone/models/sampling.py#L4-14), one workgroup per row:
//   token = first argmax_c (logit[c] / t + g(u[c])),  g(u) = -log_safe(-log_safe(u)),
//   log_safe(x) = ln(max(x, 1e-20)),  t = max(temperature, 1e-10) (passed in by the host).
// The uniforms are injected (binding 1) or drawn here from the same counter-based stream as
// src/cpu/rng.rs, bit for bit: uniform i = (splitmix64(seed, counter + i) >> 40) * 2^-24, with
// the 64-bit arithmetic done on 32-bit halves (no shaderInt64 needed).
//
// ln is fdlibm's logf (below, < 1 ulp) and the division is correctly rounded, so g(u) is
// within a few ulp of the CPU's, not bit-identical (libm's logf is not correctly rounded
// either, and differs between libms). A token therefore equals the CPU's unless the two best
// scores of its row lie within that error of each other (see VulkanBackend::gumbel).
//
// Spec constant 1 set: a test hook instead writes (u, g(u)) as f32 bits for every element,
// out[2 i] and out[2 i + 1], one invocation each (src/vulkan/kernels.rs, `gumbel_noise`).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool NOISE_ONLY = false;

#include "argmax.glsl"

layout(set = 0, binding = 0) readonly buffer L { float logits[]; };
layout(set = 0, binding = 1) readonly buffer U { float uniforms[]; };
layout(set = 0, binding = 2) writeonly buffer O { uint o[]; };

layout(push_constant) uniform Push {
    uint l_off;
    uint u_off;
    uint o_off;
    uint rows;
    uint cols;
    float t;
    uint seed_lo;
    uint seed_hi;
    uint counter_lo;
    uint counter_hi;
    uint has_uniforms;
} p;

// ---- SplitMix64 on (lo, hi) halves ----------------------------------------------------------

uvec2 add64(uvec2 a, uvec2 b) {
    uint carry;
    uint lo = uaddCarry(a.x, b.x, carry);
    return uvec2(lo, a.y + b.y + carry);
}

// a * b mod 2^64.
uvec2 mul64(uvec2 a, uvec2 b) {
    uint hi;
    uint lo;
    umulExtended(a.x, b.x, hi, lo);
    return uvec2(lo, hi + a.x * b.y + a.y * b.x);
}

// a ^ (a >> s) for 0 < s < 32.
uvec2 xorshift64(uvec2 a, uint s) {
    return uvec2(a.x ^ ((a.x >> s) | (a.y << (32u - s))), a.y ^ (a.y >> s));
}

const uvec2 GAMMA = uvec2(0x7f4a7c15u, 0x9e3779b9u);

// SplitMix64's finaliser (rng.rs `mix`).
uvec2 mix64(uvec2 z) {
    z = mul64(xorshift64(z, 30u), uvec2(0x1ce4e5b9u, 0xbf58476du));
    z = mul64(xorshift64(z, 27u), uvec2(0x133111ebu, 0x94d049bbu));
    return xorshift64(z, 31u);
}

// Uniform number counter + i of the stream (rng.rs `uniform`): the top 24 bits times 2^-24.
float stream_uniform(uint i) {
    uvec2 n = add64(add64(uvec2(p.counter_lo, p.counter_hi), uvec2(i, 0u)), uvec2(1u, 0u));
    uvec2 z = mix64(add64(uvec2(p.seed_lo, p.seed_hi), mul64(n, GAMMA)));
    return float(z.y >> 8u) * (1.0 / 16777216.0);
}

// ---- ln ----------------------------------------------------------------------------------

// ln(x) for positive normal finite x: FreeBSD msun e_logf.c (fdlibm), < 1 ulp. x = 2^k m with
// m in [sqrt(2)/2, sqrt(2)), f = m - 1, ln(1 + f) = f - hfsq + s (hfsq + R), s = f / (2 + f).
// Its k == 0 branches are the general ones with dk = 0, bit for bit.
float log_f32(float x) {
    const float LN2_HI = uintBitsToFloat(0x3f317180u);
    const float LN2_LO = uintBitsToFloat(0x3717f7d1u);
    const float LG1 = uintBitsToFloat(0x3f2aaaaau);
    const float LG2 = uintBitsToFloat(0x3eccce13u);
    const float LG3 = uintBitsToFloat(0x3e91e9eeu);
    const float LG4 = uintBitsToFloat(0x3e789e26u);
    int ix = floatBitsToInt(x);
    int k = (ix >> 23) - 127;
    ix &= 0x007fffff;
    int i = (ix + (0x95f64 << 3)) & 0x800000;
    // m or m / 2, whichever lies in [sqrt(2)/2, sqrt(2)).
    float m = intBitsToFloat(ix | (i ^ 0x3f800000));
    k += i >> 23;
    precise float f = m - 1.0;
    precise float dk = float(k);
    if ((0x007fffff & (0x8000 + ix)) < 0xc000) {
        // -2^-9 <= f < 2^-9
        if (f == 0.0) {
            precise float r0 = dk * LN2_HI + dk * LN2_LO;
            return r0;
        }
        precise float r = f * f * (0.5 - 0.33333333333333333 * f);
        precise float r1 = dk * LN2_HI - ((r - dk * LN2_LO) - f);
        return r1;
    }
    precise float s = div_rn(f, 2.0 + f);
    precise float z = s * s;
    precise float w = z * z;
    precise float t1 = w * (LG2 + w * LG4);
    precise float t2 = z * (LG1 + w * LG3);
    precise float r = t2 + t1;
    if (((ix - (0x6147a << 3)) | ((0x6b851 << 3) - ix)) > 0) {
        precise float hfsq = 0.5 * f * f;
        precise float r2 = dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f);
        return r2;
    }
    precise float r3 = dk * LN2_HI - ((s * (f - r) - dk * LN2_LO) - f);
    return r3;
}

// ln(max(x, 1e-20)), with Rust's f32::max semantics: a NaN argument gives the other operand.
float log_safe(float x) {
    // 1e-20f32, from its bits (a decimal literal might round through double).
    const float TINY = uintBitsToFloat(0x1e3ce508u);
    float c = x > TINY ? x : TINY;
    // Infinity (compared, not isinf(): drivers may fold that under relaxed float rules).
    if (c > 3.40282347e38) {
        return c;
    }
    return log_f32(c);
}

float gumbel_noise(float u) {
    return -log_safe(-log_safe(u));
}

float uniform_at(uint i) {
    return p.has_uniforms != 0u ? uniforms[p.u_off + i] : stream_uniform(i);
}

void main() {
    if (NOISE_ONLY) {
        uint i = global_index();
        if (i < p.rows * p.cols) {
            float u = uniform_at(i);
            o[p.o_off + 2u * i] = floatBitsToUint(u);
            o[p.o_off + 2u * i + 1u] = floatBitsToUint(gumbel_noise(u));
        }
        return;
    }
    uint row = am_row();
    // Uniform per workgroup, so every invocation of a live row reaches the barriers.
    if (row >= p.rows) {
        return;
    }
    uint tid = gl_LocalInvocationID.x;
    uint base = row * p.cols;
    float bv = 0.0;
    uint bi = 0u;
    for (uint c = tid; c < p.cols; c += WORKGROUP_SIZE) {
        precise float s = div_rn(logits[p.l_off + base + c], p.t) + gumbel_noise(uniform_at(base + c));
        if (c == tid) {
            bv = s;
            bi = c;
        } else {
            am_fold(bv, bi, s, c);
        }
    }
    if (tid >= p.cols) {
        // No column of its own: a candidate that loses to every real one.
        bv = uintBitsToFloat(0xff800000u);
        bi = 0xffffffffu;
    }
    uint best = am_reduce(bv, bi);
    if (tid == 0u) {
        o[p.o_off + row] = best;
    }
}
