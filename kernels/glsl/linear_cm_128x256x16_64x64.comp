#version 450
// Fast-mode linear (see linear_cm.glsl): 128 x 256 tiles, k steps of 16, 8 subgroups of 64 x 64, two shared buffers.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#define BM 128
#define BN 256
#define BK 16
#define WM 64
#define WN 64
#define DB 1
#include "linear_cm.glsl"
