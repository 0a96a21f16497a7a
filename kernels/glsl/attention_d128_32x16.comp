#version 450
// Fused attention (attention.glsl) fixed at compile time: head_dim 128, 32 query rows x 16 keys
// per tile, 128 invocations.
#extension GL_GOOGLE_include_directive : require
#define HEAD_DIM 128
#define BQ 32
#define BKV 16
#define WG 128
#include "attention.glsl"
