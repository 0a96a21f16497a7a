#version 450
// Fused attention (attention.glsl) fixed at compile time: head_dim 64, 64 query rows x 8 keys
// per tile, 128 invocations.
#extension GL_GOOGLE_include_directive : require
#define HEAD_DIM 64
#define BQ 64
#define BKV 8
#define WG 128
#include "attention.glsl"
