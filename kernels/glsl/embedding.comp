#version 450
// Embedding gather out[t, :] = table[ids[t], :] widened exactly to f32 from f32, f16, bf16 or
// q8_0 (spec constant 1). One invocation per output element.
//
// A table larger than one binding is split into row ranges, one dispatch each: this one binds
// rows row0 .. row0 + rows and writes only the tokens whose ids fall there (and a large output
// into token ranges: this one handles tokens t0 .. t0 + tokens). An id outside the whole
// table cannot raise an error on the device: the dispatch with `check` set writes zeros for
// that token and records it in the status words, which the host reads after the run
// (src/vulkan/backend.rs, `take_errors`) and turns into the CPU backend's error:
//   status[0] += 1 per bad token, status[1] = max(~position), status[2] = max(bad id),
// so all-zero words mean every id was in range, and valid ids never touch them.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
// 0 f32, 1 f16, 2 bf16, 3 q8_0
layout(constant_id = 1) const uint T_DTYPE = 0;

layout(set = 0, binding = 0) readonly buffer Ids { uint ids[]; };
layout(set = 0, binding = 1) readonly buffer Table { uint table[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float o[]; };
layout(set = 0, binding = 3) buffer Status { uint status[]; };

layout(push_constant) uniform Push {
    uint ids_off;
    // elements for f32/f16/bf16, bytes for q8_0
    uint t_off;
    uint o_off;
    uint s_off;
    uint tokens;
    uint t0;
    uint vocab;
    uint dim;
    uint row0;
    uint rows;
    uint check;
} p;

float load_t(uint e) {
    if (T_DTYPE == 0u) {
        return uintBitsToFloat(table[p.t_off + e]);
    } else if (T_DTYPE == 1u) {
        return LOAD_F16(table, p.t_off + e);
    } else if (T_DTYPE == 2u) {
        return LOAD_BF16(table, p.t_off + e);
    }
    return LOAD_Q8_0(table, p.t_off, e);
}

void main() {
    uint i = global_index();
    if (i >= p.tokens * p.dim) {
        return;
    }
    uint t = i / p.dim;
    uint d = i % p.dim;
    uint id = ids[p.ids_off + t];
    if (id >= p.vocab) {
        if (p.check != 0u) {
            o[p.o_off + i] = 0.0;
            if (d == 0u) {
                atomicAdd(status[p.s_off], 1u);
                atomicMax(status[p.s_off + 1u], ~(p.t0 + t));
                atomicMax(status[p.s_off + 2u], id);
            }
        }
        return;
    }
    if (id < p.row0 || id - p.row0 >= p.rows) {
        return;
    }
    o[p.o_off + i] = load_t((id - p.row0) * p.dim + d);
}
