#version 450
// Fused attention (attention.glsl) for any head dimension and tile: they are specialization
// constants here. The attention_d*.comp variants fix them at compile time.
#extension GL_GOOGLE_include_directive : require
layout(constant_id = 1) const uint HEAD_DIM = 64;
// Query rows per workgroup (a multiple of 4).
layout(constant_id = 2) const uint BQ = 16;
// Keys per shared-memory tile (a multiple of 2).
layout(constant_id = 3) const uint BKV = 16;
#include "attention.glsl"
