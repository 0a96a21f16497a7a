#version 450
// Fast-mode attention (see attention_cm.glsl): head dimension 128, 64 queries per workgroup
// of 4 subgroups, keys 32 at a time.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#define HD 128
#define BQ 64
#define BKV 32
#include "attention_cm.glsl"
