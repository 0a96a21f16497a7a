#version 450
// The split-k epilogue of linear_stream.comp: y[row, col] = act(sum over splits s in
// ascending order of part[s, row, col] + bias[col]), one invocation per output (a fixed order:
// deterministic run to run and device to device). With CONV defined (conv1d_stream_reduce) y is
// conv1d's `[batch, c_out, out_len]` with row = (b, t) and col the output channel.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Part { float part[]; };
layout(set = 0, binding = 1) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint part_off;
    uint b_off;
    uint y_off;
    uint m;
    uint n;
    // elements between rows of y
    uint ldy;
    uint splits;
    uint has_bias;
    uint act;
    float slope;
#ifdef CONV
    uint out_len;
#endif
} p;

#ifdef CONV
#define Y_INDEX(row, col) (p.y_off + ((row) / p.out_len * p.n + (col)) * p.out_len + (row) % p.out_len)
#else
#define Y_INDEX(row, col) (p.y_off + (row) * p.ldy + (col))
#endif

void main() {
    uint i = global_index();
    if (i >= p.m * p.n) {
        return;
    }
    uint row = i / p.n;
    uint col = i % p.n;
    float v = 0.0;
    for (uint s = 0u; s < p.splits; s++) {
        v += part[p.part_off + (s * p.m + row) * p.n + col];
    }
    if (p.has_bias != 0u) {
        v += bias[p.b_off + col];
    }
    y[Y_INDEX(row, col)] = activate(p.act, p.slope, v);
}
