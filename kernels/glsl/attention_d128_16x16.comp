#version 450
// Fused attention (attention.glsl) fixed at compile time: head_dim 128, 16 query rows x 16 keys
// per tile, 64 invocations.
#extension GL_GOOGLE_include_directive : require
#define HEAD_DIM 128
#define BQ 16
#define BKV 16
#define WG 64
#include "attention.glsl"
