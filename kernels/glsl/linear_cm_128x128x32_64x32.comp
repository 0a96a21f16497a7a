#version 450
// Fast-mode linear (see linear_cm.glsl): 128 x 128 tiles, k steps of 32, 8 subgroups of 64 x 32.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#define BM 128
#define BN 128
#define BK 32
#define WM 64
#define WN 32
#include "linear_cm.glsl"
