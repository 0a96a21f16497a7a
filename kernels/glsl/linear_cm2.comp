#version 450
// Fast-mode linear on workgroup-scope cooperative matrices: see linear_cm2.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#include "linear_cm2.glsl"
