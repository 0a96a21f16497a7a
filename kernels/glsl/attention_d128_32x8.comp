#version 450
// Fused attention (attention.glsl) fixed at compile time: head_dim 128, 32 query rows x 8 keys
// per tile, 64 invocations.
#extension GL_GOOGLE_include_directive : require
#define HEAD_DIM 128
#define BQ 32
#define BKV 8
#define WG 64
#include "attention.glsl"
