#version 450
// Fast-mode attention (see attention_cm.glsl): head dimension 128, 32 queries per workgroup
// of 2 subgroups, keys 32 at a time.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#define HD 128
#define BQ 32
#define BKV 32
#include "attention_cm.glsl"
