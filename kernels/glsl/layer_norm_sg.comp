#version 450
// Fast-mode variant of layer_norm: the row reductions use subgroup arithmetic (rows.glsl,
// SUBGROUP_REDUCE). Body in layer_norm.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define SUBGROUP_REDUCE
#include "layer_norm.glsl"
