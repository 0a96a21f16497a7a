#version 450
// Strided copy of up to 6 dimensions between buffers of one dtype, 4- or 2-byte elements
// (spec constant 1). One invocation per element of `shape`; destination elements must be
// distinct (strides that alias write in an unspecified order).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ELEM_BYTES = 4;

layout(set = 0, binding = 0) readonly buffer S { uint s[]; };
layout(set = 0, binding = 1) buffer D { uint d[]; };

layout(push_constant) uniform Push {
    uint s_off;
    uint d_off;
    uint count;
    uint rank;
    uint shape[6];
    uint s_stride[6];
    uint d_stride[6];
} p;

void main() {
    uint i = global_index();
    if (i >= p.count) {
        return;
    }
    uint rem = i;
    uint so = p.s_off;
    uint dn = p.d_off;
    for (uint k = p.rank; k > 0u; k--) {
        uint c = rem % p.shape[k - 1u];
        rem /= p.shape[k - 1u];
        so += c * p.s_stride[k - 1u];
        dn += c * p.d_stride[k - 1u];
    }
    if (ELEM_BYTES == 4u) {
        d[dn] = s[so];
    } else {
        uint v = HALF_BITS(s, so);
        STORE_U16(d, dn, v);
    }
}
