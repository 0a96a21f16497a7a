#version 450
// Fast-mode variant of softmax: the row reductions use subgroup arithmetic (rows.glsl,
// SUBGROUP_REDUCE). Body in softmax.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define SUBGROUP_REDUCE
#include "softmax.glsl"
