#version 450
// Fast-mode linear (see linear_cm.glsl): 64 x 64 tiles, k steps of 32, 4 subgroups of 32 x 32.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#define BM 64
#define BN 64
#define BK 32
#define WM 32
#define WN 32
#include "linear_cm.glsl"
