#version 450
// The device's global-memory read bandwidth (`kinema bench --op read_peak`): every invocation
// reads 16-byte words of a buffer far larger than the last-level cache, IN_FLIGHT independent
// loads at a time, consecutive invocations reading consecutive words (each warp-wide load is
// 512 contiguous bytes), and folds them with xor. Nothing is written unless the fold equals a
// value the host never fills the buffer to give, so the loads are the whole cost. It bounds
// what the weight-streaming linears could reach (the GPU counterpart of a copy kernel, without
// the writes).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

#define IN_FLIGHT 4u

layout(set = 0, binding = 0) readonly buffer S { uvec4 s[]; };
layout(set = 0, binding = 1) writeonly buffer Y { uint y[]; };

layout(push_constant) uniform Push {
    // floats (the host binds f32 views); 16-byte aligned
    uint s_off;
    uint y_off;
    // 16-byte words to read
    uint words;
} p;

void main() {
    uint threads = gl_NumWorkGroups.x * WORKGROUP_SIZE;
    uint base = p.s_off / 4u;
    uvec4 acc = uvec4(0u);
    for (uint i = gl_GlobalInvocationID.x; i < p.words; i += IN_FLIGHT * threads) {
        uvec4 v[IN_FLIGHT];
        [[unroll]] for (uint u = 0u; u < IN_FLIGHT; u++) {
            uint e = i + u * threads;
            v[u] = e < p.words ? s[base + e] : uvec4(0u);
        }
        [[unroll]] for (uint u = 0u; u < IN_FLIGHT; u++) {
            acc ^= v[u];
        }
    }
    uint r = acc.x ^ acc.y ^ acc.z ^ acc.w;
    if (r == 0x9e3779b9u) {
        y[p.y_off] = r;
    }
}
