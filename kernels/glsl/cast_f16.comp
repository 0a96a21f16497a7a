#version 450
// y = x rounded to f16 (the conversion the fast-mode GEMMs apply to x), two elements a word:
// element 2i in the low half of word i, a zero high half after an odd count. One invocation
// per word. Fast mode's workgroup-scope GEMM reads x as f16 from here, so that the matrix
// loads take the operand as it is (see linear_cm2.comp, X_DTYPE).
// SPLIT 1 (split precision): the words from y_off hold x's high parts and the (n + 1) / 2
// words after them its low parts (common.glsl, f16_hi_part and f16_lo_part).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SPLIT = 0;

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
    if (SPLIT == 1u) {
        float ah = f16_hi_part(a);
        float bh = f16_hi_part(b);
        y[p.y_off + i] = packFloat2x16(f16vec2(float16_t(ah), float16_t(bh)));
        y[p.y_off + (p.n + 1u) / 2u + i] =
            packFloat2x16(f16vec2(float16_t(f16_lo_part(a)), float16_t(f16_lo_part(b))));
    } else {
        y[p.y_off + i] = packFloat2x16(f16vec2(float16_t(a), float16_t(b)));
    }
}
