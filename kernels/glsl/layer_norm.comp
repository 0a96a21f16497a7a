#version 450
// Strict reductions: fixed trees over invocation ids (rows.glsl). Body in layer_norm.glsl.
#extension GL_GOOGLE_include_directive : require
#include "layer_norm.glsl"
