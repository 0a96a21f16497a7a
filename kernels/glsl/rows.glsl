// Helpers of the row-wise shaders (norms, softmax), one workgroup per row. Include after
// common.glsl. WORKGROUP_SIZE must be a power of two (the host picks it so).

// Scratch of the reductions below.
shared float red_buf[WORKGROUP_SIZE];

#ifdef SUBGROUP_REDUCE
// Fast mode: each subgroup reduces in hardware, then every invocation combines the subgroup
// partials in subgroup order. Fewer barriers than the tree; the order within a subgroup is the
// device's, so results may differ from strict mode in the last bits. Same contract as below.
float wg_sum(float v) {
    float s = subgroupAdd(v);
    if (subgroupElect()) {
        red_buf[gl_SubgroupID] = s;
    }
    barrier();
    float r = red_buf[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) {
        r += red_buf[i];
    }
    barrier();
    return r;
}

float wg_max(float v) {
    float s = subgroupMax(v);
    if (subgroupElect()) {
        red_buf[gl_SubgroupID] = s;
    }
    barrier();
    float r = red_buf[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) {
        r = max(r, red_buf[i]);
    }
    barrier();
    return r;
}
#else
// The sum of v over the workgroup, as a pairwise tree over invocation ids: the same order on
// every run and for any subgroup size (no subgroup operations). Every invocation must call it
// (it has barriers) and every invocation gets the result.
float wg_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    red_buf[t] = v;
    barrier();
    for (uint s = WORKGROUP_SIZE / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            red_buf[t] += red_buf[t + s];
        }
        barrier();
    }
    float r = red_buf[0];
    // The next reduction overwrites red_buf.
    barrier();
    return r;
}

// The maximum of v over the workgroup (same contract as wg_sum).
float wg_max(float v) {
    uint t = gl_LocalInvocationID.x;
    red_buf[t] = v;
    barrier();
    for (uint s = WORKGROUP_SIZE / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            red_buf[t] = max(red_buf[t], red_buf[t + s]);
        }
        barrier();
    }
    float r = red_buf[0];
    barrier();
    return r;
}
#endif

// sqrt(v) within 1 ulp (almost always correctly rounded). Vulkan bounds sqrt() only as
// 1 / inversesqrt() (several ulp), so the root s is corrected once with its exact residual:
// s + (v - s^2) / (2 s). Zero, negative, infinite, NaN and extreme operands keep sqrt().
float sqrt_rn(float v) {
    precise float s = sqrt(v);
    if (!(v > 0.0) || isinf(v) || v > 1e30 || v < 1e-30) {
        return s;
    }
    float p;
    float e;
    two_prod(s, s, p, e);
    // v - p is exact (p is within a few ulp of v).
    precise float r = (v - p) - e;
    precise float c = s + r / (2.0 * s);
    return c;
}
