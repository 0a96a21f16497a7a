#version 450
// EXPERIMENT: linear_cm2.glsl without the unclamped, unrolled interior loop.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#define INTERIOR 0u
#include "linear_cm2.glsl"
