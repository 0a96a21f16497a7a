#version 450
// y = x rounded to f16 (the conversion the fast-mode GEMMs apply to x), two elements a word:
// element 2i in the low half of word i, a zero high half after an odd count. One invocation
// per word. Fast mode's workgroup-scope GEMM reads x as f16 from here, so that the matrix
// loads take the operand as it is (see linear_cm2.comp, X_DTYPE).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { uint y[]; };

layout(push_constant) uniform Push {
    uint x_off;
    // words
    uint y_off;
    // elements of x
    uint n;
} p;

void main() {
    uint i = global_index();
    uint e = 2u * i;
    if (e >= p.n) {
        return;
    }
    float a = x[p.x_off + e];
    float b = e + 1u < p.n ? x[p.x_off + e + 1u] : 0.0;
    y[p.y_off + i] = packFloat2x16(f16vec2(float16_t(a), float16_t(b)));
}
