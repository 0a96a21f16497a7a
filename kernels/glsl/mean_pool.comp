#version 450
// Masked mean over the sequence: x [batch, seq, dim], mask u32 [batch, seq] (nonzero includes
// the token) -> out [batch, dim]; a row with no included token gives zeros. One invocation per
// output element sums its column in ascending token order with Neumaier's compensated
// summation (so the result is close to the f64 reference's, whatever the sequence length),
// then divides with correct rounding.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer M { uint mask[]; };
layout(set = 0, binding = 2) writeonly buffer O { float o[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint m_off;
    uint o_off;
    uint batch;
    uint seq;
    uint dim;
} p;

void main() {
    uint i = global_index();
    if (i >= p.batch * p.dim) {
        return;
    }
    uint b = i / p.dim;
    uint d = i % p.dim;
    precise float sum = 0.0;
    precise float comp = 0.0;
    uint count = 0u;
    for (uint s = 0u; s < p.seq; s++) {
        if (mask[p.m_off + b * p.seq + s] == 0u) {
            continue;
        }
        count++;
        precise float v = x[p.x_off + (b * p.seq + s) * p.dim + d];
        precise float t = sum + v;
        // The rounding error of sum + v, exactly (Neumaier's branch on the larger operand).
        if (abs(sum) >= abs(v)) {
            comp += (sum - t) + v;
        } else {
            comp += (v - t) + sum;
        }
        sum = t;
    }
    // An infinite sum leaves a NaN compensation (inf - inf): keep the sum alone then.
    bool inf = (floatBitsToUint(sum) & 0x7fffffffu) == 0x7f800000u;
    precise float total = inf ? sum : sum + comp;
    o[p.o_off + i] = count == 0u ? 0.0 : div_rn(total, float(count));
}
