#version 450
// The device's global-memory read bandwidth (`kinema bench --op read_peak`), in two access
// patterns. With row_words 0, every invocation reads 16-byte words of a buffer far larger than
// the last-level cache, IN_FLIGHT independent loads at a time, consecutive invocations reading
// consecutive words (each warp-wide load is 512 contiguous bytes). With row_words > 0 the
// buffer is rows of row_words words (a weight matrix) and each 32 consecutive invocations own 8
// rows at a time: invocation l reads word 4 j + l % 4 of row l / 4 at step j, so each load of
// 32 invocations is 64 contiguous bytes from each of 8 rows, the pattern of the lane-loading
// linears (`linear_cm.comp` with LANE) over a weight matrix. Each invocation folds its words
// with xor and writes the fold (4 bytes against its kilobytes read), so the host can check
// that every word was read exactly once. It bounds what the weight-streaming linears could
// reach.
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
    // 0: contiguous; else words per row, a multiple of 4 (rows of 8 per 32 invocations)
    uint row_words;
} p;

void main() {
    uint threads = gl_NumWorkGroups.x * WORKGROUP_SIZE;
    uint base = p.s_off / 4u;
    uvec4 acc = uvec4(0u);
    if (p.row_words != 0u) {
        uint rows = p.words / p.row_words;
        uint lane = gl_GlobalInvocationID.x % 32u;
        uint steps = p.row_words / 4u;
        for (uint r0 = (gl_GlobalInvocationID.x / 32u) * 8u; r0 < rows; r0 += threads / 4u) {
            uint row = r0 + lane / 4u;
            uint first = base + row * p.row_words + lane % 4u;
            for (uint j = 0u; j < steps; j += IN_FLIGHT) {
                uvec4 v[IN_FLIGHT];
                [[unroll]] for (uint u = 0u; u < IN_FLIGHT; u++) {
                    v[u] = row < rows && j + u < steps ? s[first + 4u * (j + u)] : uvec4(0u);
                }
                [[unroll]] for (uint u = 0u; u < IN_FLIGHT; u++) {
                    acc ^= v[u];
                }
            }
        }
    }
    for (uint i = gl_GlobalInvocationID.x; p.row_words == 0u && i < p.words;
         i += IN_FLIGHT * threads) {
        uvec4 v[IN_FLIGHT];
        [[unroll]] for (uint u = 0u; u < IN_FLIGHT; u++) {
            uint e = i + u * threads;
            v[u] = e < p.words ? s[base + e] : uvec4(0u);
        }
        [[unroll]] for (uint u = 0u; u < IN_FLIGHT; u++) {
            acc ^= v[u];
        }
    }
    y[p.y_off + gl_GlobalInvocationID.x] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
